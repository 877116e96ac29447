"""Open Inference Protocol v2 (KServe / Triton REST) against the JSON routes as the reference.

Requests and binary responses are built and read by the official Triton client (`tritonclient.http`):
in process through its public `generate_request_body` / `parse_response_body`, and against a real
server process through `InferenceServerClient` itself. Two models are served: the tiny attnserve bundle
("tiny", the default) and the tiny Hugging Face BERT bundle ("bert").
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import pytest_asyncio
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from inference.runtime.graphs import ATTENTION, FAST
from tests.helpers.fakes import Counting, GatedBundle, held
from tests.helpers.process import running
from tests.helpers.serving import graph_runs, serving, until

TEXTS = ["a cat sat on the mat", "dogs"]
LABELS = ["neg", "pos"]


@pytest_asyncio.fixture(loop_scope="function")
async def two(tiny_bundle, tiny_hf_bundle):
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], intra_op_threads=1, max_inputs=8,
                       attention_cap_bytes=200_000, payload_limit_bytes=20_000) as (app, client):
        yield app, client


def protocol_error(response: httpx.Response, status: int) -> str:
    """The protocol's error body, and nothing of the one shape of the other routes."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str), body
    assert "Traceback" not in body["error"] and "/work/" not in body["error"]
    return str(body["error"])


def text_input(texts: list[str], binary: bool) -> triton.InferInput:
    tensor = triton.InferInput("text", [len(texts)], "BYTES")
    return tensor.set_data_from_numpy(np.array(texts, dtype=object), binary_data=binary)


async def infer(
    client: httpx.AsyncClient, model: str, inputs: list[triton.InferInput], outputs: list[str] | None = None,
    binary: bool = False, **parameters: Any,
) -> triton.InferResult:
    """One inference through the Triton client's own request writer and response reader."""
    requested = [triton.InferRequestedOutput(name, binary_data=binary) for name in outputs] if outputs else None
    body, json_size = triton.InferenceServerClient.generate_request_body(
        inputs, outputs=requested, request_id="req-1", parameters=parameters or None,
    )
    headers = {"Inference-Header-Content-Length": str(json_size)} if json_size is not None else {}
    response = await client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    length = response.headers.get("inference-header-content-length")
    assert (length is not None) == binary
    return triton.InferenceServerClient.parse_response_body(response.content, header_length=length and int(length))


def reference_requests(model: str, texts: list[str], **attention: Any) -> list[tuple[str, dict[str, Any]]]:
    """The JSON routes' requests for the same texts: embeddings, logits, scores, attention maps."""
    return [
        ("/v1/embeddings", {"input": texts, "model": model}),
        ("/classify", {"inputs": texts, "model": model, "raw_scores": True}),
        ("/classify", {"inputs": texts, "model": model}),
        ("/attention", {"inputs": texts, "model": model, **attention}),
    ]


async def reference(client: httpx.AsyncClient, model: str, texts: list[str], **attention: Any) -> dict[str, Any]:
    answers = [(await client.post(path, json=body)).json() for path, body in reference_requests(model, texts,
                                                                                                 **attention)]
    return reference_of(answers)


def reference_of(answers: list[Any]) -> dict[str, Any]:
    openai, raw, soft, maps = answers
    return {
        "embeddings": np.array([d["embedding"] for d in openai["data"]], dtype=np.float32),
        "logits": _by_label(raw), "scores": _by_label(soft),
        "attentions": [np.array(d["attention"], dtype=np.float32) for d in maps["data"]],
    }


def _by_label(ranked: list[list[dict[str, Any]]]) -> np.ndarray:
    return np.array([[{s["label"]: s["score"] for s in row}[label] for label in LABELS] for row in ranked],
                    dtype=np.float32)


def assert_same_attentions(padded: np.ndarray, mask: np.ndarray, expected: list[np.ndarray]) -> None:
    for index, one in enumerate(expected):
        n = int(mask[index].sum())
        assert one.shape[-1] == n
        np.testing.assert_allclose(padded[index, ..., :n, :n], one, rtol=1e-5, atol=1e-6)
        assert not padded[index, ..., n:, :].any() and not padded[index, ..., :, n:].any()  # zero padding


# -- metadata and health ---------------------------------------------------------------------------
async def test_server_and_model_metadata_and_health(two):
    _, client = two
    server = (await client.get("/v2")).json()
    assert server["name"] == "attnserve" and server["extensions"] == ["binary_tensor_data"]
    assert (await client.get("/v2/health/live")).json() == {"live": True}
    assert (await client.get("/v2/health/ready")).json() == {"ready": True}
    meta = (await client.get("/v2/models/bert")).json()
    assert meta["name"] == "bert" and meta["platform"] == "onnx_onnxv1" and meta["versions"] == ["1"]
    assert {t["name"]: (t["datatype"], t["shape"]) for t in meta["inputs"]} == {
        "text": ("BYTES", [-1]), "input_ids": ("INT64", [-1, -1]), "attention_mask": ("INT64", [-1, -1]),
    }
    outputs = {t["name"]: (t["datatype"], t["shape"]) for t in meta["outputs"]}
    assert outputs == {
        "embeddings": ("FP32", [-1, 32]), "logits": ("FP32", [-1, 2]), "scores": ("FP32", [-1, 2]),
        "attentions": ("FP32", [-1, -1, -1, -1, -1]), "attention_mask": ("INT64", [-1, -1]),
    }
    assert (await client.get("/v2/models/tiny/versions/7")).json()["name"] == "tiny"
    assert (await client.get("/v2/models/tiny/versions/7/ready")).json() == {"name": "tiny", "ready": True}
    assert (await client.get("/v2/models/bert/ready")).json() == {"name": "bert", "ready": True}
    assert "served models: tiny, bert" in protocol_error(await client.get("/v2/models/gpt"), 404)
    assert "version '8'" in protocol_error(await client.get("/v2/models/tiny/versions/8/ready"), 404)


# -- inference equals the JSON routes ------------------------------------------------------------------
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_outputs_equal_the_json_routes(two, binary):
    _, client = two
    for model in ("tiny", "bert"):
        want = await reference(client, model, TEXTS)
        result = await infer(client, model, [text_input(TEXTS, binary)],
                             ["embeddings", "logits", "scores", "attentions", "attention_mask"], binary)
        assert result.get_response()["model_name"] == model and result.get_response()["id"] == "req-1"
        for name in ("embeddings", "logits", "scores"):
            assert result.as_numpy(name).dtype == np.float32
            np.testing.assert_allclose(result.as_numpy(name), want[name], rtol=1e-5, atol=1e-6, err_msg=name)
        assert result.as_numpy("attentions").shape[:3] == (2, 2, 2)  # (N, l, h, T, T)
        assert_same_attentions(result.as_numpy("attentions"), result.as_numpy("attention_mask"), want["attentions"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_attention_choices_as_parameters(two, binary):
    _, client = two
    for aggregation, layers, heads in (("mean", "1", None), ("max", "0,1", 1), ("rollout", None, None)):
        chosen: dict[str, Any] = {"layers": [int(v) for v in layers.split(",")]} if layers else {}
        chosen |= {"heads": [heads]} if heads is not None else {}
        want = await reference(client, "bert", TEXTS, aggregation=aggregation, **chosen)
        params = {k: v for k, v in (("layers", layers), ("heads", heads)) if v is not None}
        result = await infer(client, "bert", [text_input(TEXTS, binary)], ["attentions", "attention_mask"], binary,
                             aggregation=aggregation, **params)
        assert_same_attentions(result.as_numpy("attentions"), result.as_numpy("attention_mask"), want["attentions"])


async def test_default_outputs_and_token_id_inputs(two):
    _, client = two
    by_text = await infer(client, "tiny", [text_input(TEXTS, True)], binary=True)  # no outputs: all binary, fast ones
    assert [o["name"] for o in by_text.get_response()["outputs"]] == ["embeddings", "logits", "scores"]
    tokens = (await client.post("/tokenize", json={"inputs": TEXTS, "model": "tiny"})).json()
    ids = [[t["id"] for t in row] for row in tokens]
    width = max(len(row) for row in ids)
    padded = np.array([row + [0] * (width - len(row)) for row in ids], dtype=np.int64)
    mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in ids], dtype=np.int64)
    tensors = [triton.InferInput("input_ids", list(padded.shape), "INT64").set_data_from_numpy(padded),
               triton.InferInput("attention_mask", list(mask.shape), "INT64").set_data_from_numpy(mask)]
    by_ids = await infer(client, "tiny", tensors, ["embeddings", "scores"])
    for name in ("embeddings", "scores"):
        np.testing.assert_allclose(by_ids.as_numpy(name), by_text.as_numpy(name), rtol=1e-5, atol=1e-6)
    as_json = {"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT32", "data": [[2, 7, 3]]}]}
    assert (await client.post("/v2/models/tiny/infer", json=as_json)).status_code == 200


# -- errors ----------------------------------------------------------------------------------------
def tensor(name: str, shape: list[int], datatype: str, data: list[Any]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def text_body(texts: Any = None, **extra: Any) -> dict[str, Any]:
    return {"inputs": [tensor("text", [1], "BYTES", ["a cat"] if texts is None else texts)], **extra}


LONG = "a " * 70  # past the tiny models' 64 tokens: truncated to 64
HUGE = [0, 10**20]  # no elements, and a dimension numpy cannot hold: refused before any reshape


def as_json(body: dict[str, Any]) -> bytes:
    """`body` as JSON, integers past 64 bits too (orjson refuses them)."""
    return json.dumps(body).encode()


def empty_binary(name: str, datatype: str, shape: list[int]) -> tuple[bytes, dict[str, str]]:
    """A request whose one input is binary data of 0 bytes (as `shape`'s 0 elements take)."""
    header = as_json({"inputs": [{"name": name, "shape": shape, "datatype": datatype,
                                  "parameters": {"binary_data_size": 0}}]})
    return header, {"Inference-Header-Content-Length": str(len(header))}


BAD: dict[str, tuple[Any, dict[str, str], int, str]] = {
    # name: (body, headers, status, words in the message)
    "not_json": (b"{bad", {}, 422, "Invalid JSON"),
    "no_inputs": ({"inputs": []}, {}, 422, "inputs"),
    "unknown_input": ({"inputs": [tensor("image", [1], "BYTES", ["a"])]}, {}, 422, "inputs.0.name"),
    "mask_alone": ({"inputs": [tensor("attention_mask", [1, 1], "INT64", [1])]}, {}, 422, "`text`"),
    "text_and_ids": ({"inputs": [tensor("text", [1], "BYTES", ["a"]), tensor("input_ids", [1, 1], "INT64", [5])]},
                     {}, 422, "text"),
    "mask_with_text": ({"inputs": [tensor("text", [1], "BYTES", ["a"]), tensor("attention_mask", [1, 1], "INT64",
                                                                               [1])]}, {}, 422, "attention_mask"),
    "text_as_int": ({"inputs": [tensor("text", [1], "INT64", [5])]}, {}, 422, "BYTES"),
    "count_mismatch": (text_body(["a", "b"]), {}, 422, "2 elements for shape [1]"),
    "non_string": (text_body([5]), {}, 422, "strings"),
    "ids_as_floats": ({"inputs": [tensor("input_ids", [1, 1], "INT64", [1.5])]}, {}, 422, "integers"),
    "ids_out_of_vocab": ({"inputs": [tensor("input_ids", [1, 1], "INT64", [99999])]}, {}, 422, "vocabulary"),
    "ids_overflow": (b'{"inputs": [{"name": "input_ids", "shape": [1], "datatype": "INT64", "data": [1e400]}]}', {},
                     422, "integers"),
    "ids_past_int64": (b'{"inputs": [{"name": "input_ids", "shape": [1, 1], "datatype": "INT64", '
                       b'"data": [123456789012345678901234567890]}]}', {}, 422, "range"),
    "ids_as_fp32": ({"inputs": [tensor("input_ids", [1, 1], "FP32", [1])]}, {}, 422, "inputs.0.datatype"),
    "mask_not_01": ({"inputs": [tensor("input_ids", [1, 1], "INT64", [5]), tensor("attention_mask", [1, 1], "INT64",
                                                                                  [2])]}, {}, 422, "0s and 1s"),
    "negative_dim": ({"inputs": [tensor("text", [-1], "BYTES", ["a"])]}, {}, 422, ">= 0"),
    "huge_dim_text": (as_json({"inputs": [tensor("text", HUGE, "BYTES", [])]}), {}, 422,
                      "input 'text': shape [0, 1"),
    "huge_dim_ids": (as_json({"inputs": [tensor("input_ids", HUGE, "INT64", [])]}), {}, 422,
                     "input 'input_ids': shape"),
    "huge_dim_binary_text": (*empty_binary("text", "BYTES", HUGE), 422, "each dimension 0 to 2147483647"),
    "huge_dim_binary_ids": (*empty_binary("input_ids", "INT32", HUGE), 422, "each dimension 0 to 2147483647"),
    "dim_past_int32": ({"inputs": [tensor("input_ids", [0, 2**31], "INT64", [])]}, {}, 422, "2147483647"),
    "rank_past_numpy": ({"inputs": [tensor("text", [0] * 65, "BYTES", [])]}, {}, 422, "65 dimensions; at most 2"),
    "unknown_output": (text_body(outputs=[{"name": "pooler"}]), {}, 422, "outputs.0.name"),
    "output_twice": (text_body(outputs=[{"name": "scores"}, {"name": "scores"}]), {}, 422, "twice"),
    "classification": (text_body(outputs=[{"name": "scores", "parameters": {"classification": 1}}]), {}, 422,
                       "classification"),
    "unknown_parameter": (text_body(parameters={"layer": 1}), {}, 422, "layer"),
    "bad_layers": (text_body(parameters={"layers": "0;1"}), {}, 422, "pattern"),
    "layer_out_of_range": (text_body(parameters={"layers": 5}, outputs=[{"name": "attentions"}]), {}, 422, "[0, 2)"),
    "layer_repeated": (text_body(parameters={"heads": "1,0,1"}, outputs=[{"name": "attentions"}]), {}, 422,
                       "distinct"),
    "too_many_inputs": ({"inputs": [tensor("text", [9], "BYTES", ["a"] * 9)]}, {}, 422, "ATTNSERVE_MAX_INPUTS"),
    "attention_cap": (text_body([LONG], outputs=[{"name": "attentions"}]), {}, 422, "ATTNSERVE_ATTENTION_CAP_BYTES"),
    "lone_surrogate": (b'{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["\\ud800"]}]}', {},
                       422, "Invalid JSON"),  # the JSON parser refuses it
    "header_past_body": (text_body(), {"Inference-Header-Content-Length": "100000"}, 422, "Inference-Header"),
    "raw_binary": (text_body(), {"Inference-Header-Content-Length": "0"}, 422, "raw binary"),
    "negative_header": (text_body(), {"Inference-Header-Content-Length": "-1"}, 422, "Inference-Header"),
    "trailing_bytes": (orjson.dumps(text_body()) + b"xyz", {"Inference-Header-Content-Length": "len"}, 422,
                       "3 bytes after"),
    "compressed": (text_body(), {"Content-Encoding": "gzip"}, 415, "gzip"),
    "over_payload": (text_body(["a" * 30_000]), {}, 413, "ATTNSERVE_PAYLOAD_LIMIT_BYTES"),
}


TOKENISED_TO_REFUSE = {"attention_cap", "ids_out_of_vocab"}  # the size needs the token count; the ids, a look


@pytest.mark.parametrize("case", sorted(BAD))
async def test_bad_requests_get_the_protocol_error_before_any_work(two, case):
    """Each is refused with its status and the protocol's body, without tokenising (unless refusing needs the
    tokens) and without running a graph."""
    app, client = two
    bert = app.state.models.resolve("bert")
    spy = bert.bundle.tokenizer = Counting(bert.bundle.tokenizer)
    runs = graph_runs(app)
    body, headers, status, words = BAD[case]
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    if headers.get("Inference-Header-Content-Length") == "len":
        headers = {"Inference-Header-Content-Length": str(len(orjson.dumps(text_body())))}
    response = await client.post("/v2/models/bert/infer", content=content, headers=headers)
    assert words in protocol_error(response, status)
    assert spy.calls == (1 if case in TOKENISED_TO_REFUSE else 0)
    assert graph_runs(app) == runs, "refused only after running a graph"
    assert (await client.post("/v2/models/bert/infer", json=text_body())).status_code == 200  # still serving


async def test_embeddings_and_attentions_are_one_admission_and_one_tokenisation(two, monkeypatch):
    app, client = two
    tiny = app.state.models.default
    spy = tiny.bundle.tokenizer = Counting(tiny.bundle.tokenizer)
    admitted: list[int] = []
    admit = tiny.batcher.admit
    monkeypatch.setattr(tiny.batcher, "admit", lambda n, *caller: admitted.append(n) or admit(n, *caller))
    runs = graph_runs(app)
    outputs = [{"name": "embeddings"}, {"name": "attentions"}]
    body = {"inputs": [tensor("text", [len(TEXTS)], "BYTES", TEXTS)], "outputs": outputs}
    response = await client.post("/v2/models/tiny/infer", json=body)
    assert response.status_code == 200, response.text
    assert spy.calls == 1 and admitted == [2 * len(TEXTS)]  # one admission: a permit per input and graph
    assert graph_runs(app) == runs + 2  # the fast and the attention graph, once each
    refused = await client.post("/v2/models/tiny/infer", json=text_body([LONG], outputs=outputs))
    assert "ATTNSERVE_ATTENTION_CAP_BYTES" in protocol_error(refused, 422)
    assert graph_runs(app) == runs + 2, "the fast graph ran for a request refused for its attention maps"


def binary_text(data: bytes, count: int, declared: int | None = None) -> tuple[bytes, dict[str, str]]:
    """A request whose BYTES input of `count` elements is binary `data`, written by hand (faulty framings)."""
    size = len(data) if declared is None else declared
    header = orjson.dumps({"inputs": [{"name": "text", "shape": [count], "datatype": "BYTES",
                                       "parameters": {"binary_data_size": size}}]})
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


async def test_bad_binary_data_gets_the_protocol_error(two):
    _, client = two
    body, headers = binary_text(b"\x05\0\0\0a cat\x05\0\0\0a dog", 2)
    assert (await client.post("/v2/models/tiny/infer", content=body, headers=headers)).status_code == 200
    for data, count, declared, words in (
        (b"\x05\0\0\0a cat", 1, 100, "past the body's end"),
        (b"\x02\0\0\0\xff\xfe", 1, None, "not UTF-8"),
        (b"\x05\0", 1, None, "ends inside an element's length"),
        (b"\x09\0\0\0a cat", 1, None, "length runs past its data"),
        (b"\x05\0\0\0a cat", 2, None, "1 elements for shape [2]"),
    ):
        body, headers = binary_text(data, count, declared)
        response = await client.post("/v2/models/tiny/infer", content=body, headers=headers)
        assert words in protocol_error(response, 422), data
    ids = np.array([[2, 7, 3]], dtype=np.int64).tobytes()
    header = orjson.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64",
                                       "parameters": {"binary_data_size": len(ids) - 1}}]})
    response = await client.post("/v2/models/tiny/infer", content=header + ids[:-1],
                                 headers={"Inference-Header-Content-Length": str(len(header))})
    assert "23 bytes of binary data for shape [1, 3]" in protocol_error(response, 422)


async def test_binary_outputs_are_held_to_their_own_size(two):
    """The attention cap counts what is sent: 4 bytes a value in binary, far more as JSON numbers."""
    _, client = two
    request = [text_input([LONG], binary=False)]
    result = await infer(client, "tiny", request, ["attentions"], binary=True)
    assert result.as_numpy("attentions").shape == (1, 2, 2, 64, 64)


async def test_routing_errors_and_the_key_use_the_protocol_body(tiny_bundle):
    async with serving(tiny_bundle, api_key="k3y-0123456789") as (_, client):
        for path in ("/v2/health/live", "/v2/health/ready"):  # probes need no key
            assert (await client.get(path)).status_code == 200
        refused = await client.post("/v2/models/tiny/infer", json=text_body())
        assert "API key" in protocol_error(refused, 401) and refused.headers["www-authenticate"] == "Bearer"
        key = {"Authorization": "Bearer k3y-0123456789"}
        protocol_error(await client.get("/v2/models/tiny/infer", headers=key), 405)
        protocol_error(await client.get("/v2/nothing/here", headers=key), 404)
        assert (await client.post("/v2/models/any-name/infer", json=text_body(), headers=key)).status_code == 200
        assert set((await client.get("/nothing", headers=key)).json()["error"]) == {"message", "type", "code"}


async def test_admission_and_deadlines_hold_on_v2(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around, max_queue=2, queue_timeout_s=0.5) as (app, client):
        batcher = app.state.models.default.batcher
        async with held(app, client) as plug:  # 1 of 2 permits
            waiting = asyncio.create_task(client.post("/v2/models/tiny/infer", json=text_body()))
            await until(lambda: batcher.full)
            refused = await client.post("/v2/models/tiny/infer", json=text_body())  # at the edge, body unread
            assert "no admission permit" in protocol_error(refused, 429) and refused.headers["retry-after"]
            assert "queue" in protocol_error(await waiting, 504)
        assert (await plug).status_code == 200 and batcher.in_flight == 0
        assert (await client.post("/v2/models/tiny/infer", json=text_body())).status_code == 200


# -- the official client against a real server --------------------------------------------------------
@pytest.fixture(scope="module")
def two_live(tiny_bundle: Path, tiny_hf_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("two_live") / "server.log"
    with running(tiny_bundle, log, "--bundle", f"bert={tiny_hf_bundle}") as server:
        yield server.url
    assert server.proc.returncode == 0, server.log()


def test_tritonclient_health_metadata_and_errors(two_live):
    client = triton.InferenceServerClient(two_live.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("bert")
    assert not client.is_model_ready("gpt")
    assert client.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    assert [t["name"] for t in client.get_model_metadata("tiny", "7")["outputs"]][:3] == ["embeddings", "logits",
                                                                                           "scores"]
    with pytest.raises(InferenceServerException, match="served models: tiny, bert") as raised:
        client.infer("gpt", [text_input(TEXTS, True)])
    assert raised.value.status() == "404"
    with pytest.raises(InferenceServerException, match="outputs.0.name") as raised:
        client.infer("bert", [text_input(TEXTS, True)], outputs=[triton.InferRequestedOutput("pooler")])
    assert raised.value.status() == "422"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_gets_what_the_json_routes_give(two_live, binary):
    client = triton.InferenceServerClient(two_live.removeprefix("http://"))
    with httpx.Client(base_url=two_live, timeout=30) as http:
        for model in ("tiny", "bert"):
            want = reference_of([http.post(path, json=body).json() for path, body in reference_requests(model, TEXTS)])
            outputs = [triton.InferRequestedOutput(n, binary_data=binary)
                       for n in ("embeddings", "logits", "scores", "attentions", "attention_mask")]
            result = client.infer(model, [text_input(TEXTS, binary)], outputs=outputs, model_version="" if binary
                                  else client.get_model_metadata(model)["versions"][0])
            for name in ("embeddings", "logits", "scores"):
                np.testing.assert_allclose(result.as_numpy(name), want[name], rtol=1e-5, atol=1e-6, err_msg=name)
            assert_same_attentions(result.as_numpy("attentions"), result.as_numpy("attention_mask"),
                                   want["attentions"])


async def test_the_schema_and_the_server_agree_on_integers_and_elements(two):
    """JSON Schema's integer 22.0 is an integer: binary_data_size and INT64 data take it; an element that is
    neither a string, an integer nor a row of them (an object) is refused by the schema as by the server."""
    _, client = two
    data = b"\x05\0\0\0a cat\x05\0\0\0a dog"
    header = orjson.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                       "parameters": {"binary_data_size": float(len(data))}}]})
    response = await client.post("/v2/models/tiny/infer", content=header + data,
                                 headers={"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 200, response.text
    ids = {"inputs": [tensor("input_ids", [1, 3], "INT64", [[2.0, 7, 3]])]}
    assert (await client.post("/v2/models/tiny/infer", json=ids)).status_code == 200
    for element in ({}, [{}], 2.5, True):
        body = {"inputs": [tensor("text", [1], "BYTES", [element])]}
        refused = await client.post("/v2/models/tiny/infer", json=body)
        assert "inputs.0.data: Value error, elements must be" in protocol_error(refused, 422), element
    paths = (await client.get("/openapi.json")).json()["paths"]
    schema = next(p["post"] for path, p in paths.items() if path.endswith("/infer"))
    element = schema["requestBody"]["content"]["application/json"]["schema"]["properties"]["inputs"]["items"]
    assert "object" not in orjson.dumps(element["properties"]["data"]).decode()  # no object anywhere in data


async def test_a_graph_that_fails_stops_the_requests_other_graph_run(tiny_bundle):
    """A request through two graphs whose attention run fails: its fast run is cancelled and awaited, its items
    leave the queue, before the error is raised (not left running for an answer nobody reads)."""
    async with serving(tiny_bundle, intra_op_threads=1) as (app, _):
        served = app.state.models.default
        started, ended = asyncio.Event(), []

        async def submit(ticket, kind, sequences):  # type: ignore[no-untyped-def]
            if kind == ATTENTION:
                await started.wait()
                raise RuntimeError("attention graph failed")
            started.set()
            try:
                await asyncio.sleep(60)  # a fast run still going
            finally:
                ended.append(kind)
            return []

        served.submit = submit
        with pytest.raises(RuntimeError, match="attention graph failed"):
            await served.run(["a cat sat"], [FAST, ATTENTION])
        assert ended == [FAST]  # cancelled and finished before the request's error was raised
