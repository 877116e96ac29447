"""In-process API tests on the tiny bundle: every route's happy path and its documented shape."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
import pytest_asyncio

from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import graph_runs, serving, until
from tests.helpers.tiny import SENTENCES

TEXTS = ["a warm and funny film", "the plot makes no sense at all", "dull"]


@pytest_asyncio.fixture(loop_scope="function")
async def client(tiny_bundle):
    async with serving(tiny_bundle) as (_, client):
        yield client


async def post(client, path, payload, status=200):
    response = await client.post(path, json=payload)
    assert response.status_code == status, response.text
    return response


async def test_embed_normalises_by_default_and_on_request(client):
    normed = np.array((await post(client, "/embed", {"inputs": TEXTS})).json())
    raw = np.array((await post(client, "/embed", {"inputs": TEXTS, "normalize": False})).json())
    assert normed.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(normed, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    single = np.array((await post(client, "/embed", {"inputs": TEXTS[0]})).json())
    np.testing.assert_allclose(single[0], normed[0], atol=1e-5)


async def test_embed_dimensions_truncate_then_renormalise(client):
    raw = np.array((await post(client, "/embed", {"inputs": TEXTS, "normalize": False})).json())
    short = np.array((await post(client, "/embed", {"inputs": TEXTS, "dimensions": 8})).json())
    expected = raw[:, :8] / np.linalg.norm(raw[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(short, expected, atol=1e-5)


def unit(vector):
    return np.asarray(vector) / np.linalg.norm(vector)


async def test_truncation_direction_and_default(client):
    """A text of ~300 tokens whose beginning and end differ, cut to the model's max length: Right (the default)
    keeps [CLS], the first tokens and [SEP]; Left keeps [CLS], the last tokens and [SEP]. Checked on the tokens
    /attention reports, and on the embedding, which equals that of the kept token ids sent directly."""
    text = " ".join(SENTENCES)  # "a warm and funny film ... attention heads look at tokens"
    max_length = (await client.get("/info")).json()["max_length"]
    whole = [t["id"] for t in (await post(client, "/tokenize", {"inputs": text})).json()[0]]  # not truncated
    cls, words, sep = whole[0], whole[1:-1], whole[-1]
    kept = {"Right": [cls, *words[: max_length - 2], sep], "Left": [cls, *words[2 - max_length :], sep]}
    assert len(whole) > max_length + 100 and kept["Right"][1:-1] != kept["Left"][1:-1]
    vectors = {}
    for direction, ids in kept.items():
        cut = {"inputs": text, "truncation_direction": direction}
        attention = (await post(client, "/attention", cut)).json()["data"][0]
        assert [t["id"] for t in attention["tokens"]] == ids, direction
        vectors[direction] = unit((await post(client, "/embed", {**cut, "normalize": False})).json()[0])
        direct = (await post(client, "/v1/embeddings", {"input": ids})).json()["data"][0]["embedding"]
        np.testing.assert_allclose(vectors[direction], unit(direct), atol=1e-5)
    default = (await post(client, "/embed", {"inputs": text, "normalize": False})).json()[0]
    np.testing.assert_allclose(unit(default), vectors["Right"], atol=1e-6)
    # different halves, different vectors: apart by far more than the float tolerance above (0.055 here)
    assert np.abs(vectors["Right"] - vectors["Left"]).max() > 100 * 1e-5


async def test_openai_float_base64_dimensions_usage_and_token_ids(client):
    body = {"input": TEXTS, "model": "tiny"}
    floats = (await post(client, "/v1/embeddings", body)).json()
    b64 = (await post(client, "/v1/embeddings", {**body, "encoding_format": "base64"})).json()
    assert floats["object"] == "list" and floats["model"] == "tiny" and len(floats["data"]) == 3
    assert [d["index"] for d in floats["data"]] == [0, 1, 2]
    assert floats["usage"]["prompt_tokens"] == floats["usage"]["total_tokens"] > 3
    for f, b in zip(floats["data"], b64["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        np.testing.assert_allclose(decoded, f["embedding"], atol=1e-6)
    dims = (await post(client, "/v1/embeddings", {**body, "dimensions": 4})).json()
    assert len(dims["data"][0]["embedding"]) == 4
    np.testing.assert_allclose(np.linalg.norm(dims["data"][0]["embedding"]), 1, atol=1e-5)
    ids = (await post(client, "/tokenize", {"inputs": TEXTS[0]})).json()[0]
    token_ids = [t["id"] for t in ids]
    by_ids = (await post(client, "/v1/embeddings", {"input": token_ids})).json()
    by_id_lists = (await post(client, "/v1/embeddings", {"input": [token_ids, token_ids]})).json()
    np.testing.assert_allclose(by_ids["data"][0]["embedding"], floats["data"][0]["embedding"], atol=1e-5)
    assert len(by_id_lists["data"]) == 2


async def test_classify_sorted_softmax_topk_and_raw(client):
    scores = (await post(client, "/classify", {"inputs": TEXTS})).json()
    assert len(scores) == 3
    for row in scores:
        assert {s["label"] for s in row} == {"neg", "pos"}
        assert row[0]["score"] >= row[1]["score"]
        assert sum(s["score"] for s in row) == pytest.approx(1, abs=1e-5)
    top = (await post(client, "/classify", {"inputs": TEXTS[0], "top_k": 1})).json()
    # alone vs in a batch of 3: the same label, and the score equal to float tolerance (onnxruntime's
    # GEMM blocking depends on the batch shape, so the last bits may differ)
    assert len(top[0]) == 1 and top[0][0]["label"] == scores[0][0]["label"]
    assert top[0][0]["score"] == pytest.approx(scores[0][0]["score"], abs=1e-5)
    raw = (await post(client, "/classify", {"inputs": TEXTS[0], "raw_scores": True})).json()[0]
    logits = np.array([s["score"] for s in raw])
    probs = np.exp(logits) / np.exp(logits).sum()
    assert probs[0] == pytest.approx(scores[0][0]["score"], abs=1e-5)


async def test_attention_shapes_selection_and_rollout(client):
    full = (await post(client, "/attention", {"inputs": TEXTS[:2]})).json()
    assert full["aggregation"] == "none" and len(full["data"]) == 2
    for item in full["data"]:
        n = len(item["tokens"])
        maps = np.array(item["attention"])
        assert item["shape"] == [2, 2, n, n] and maps.shape == (2, 2, n, n)
        np.testing.assert_allclose(maps.sum(-1), 1, atol=1e-5)  # rows over real tokens only
    first = np.array(full["data"][0]["attention"])
    chosen = (await post(client, "/attention", {"inputs": TEXTS[0], "layers": [1], "heads": [0]})).json()
    np.testing.assert_allclose(np.array(chosen["data"][0]["attention"]), first[[1]][:, [0]], atol=1e-6)
    mean = (await post(client, "/attention", {"inputs": TEXTS[0], "aggregation": "mean"})).json()
    np.testing.assert_allclose(np.array(mean["data"][0]["attention"]), first.mean(1), atol=1e-6)
    top = (await post(client, "/attention", {"inputs": TEXTS[0], "aggregation": "max"})).json()
    np.testing.assert_allclose(np.array(top["data"][0]["attention"]), first.max(1), atol=1e-6)


async def test_rollout_equals_the_papers_formula_over_the_reference_models_attentions(tiny_hf_dir, tiny_hf_bundle):
    """Rollout (Abnar & Zuidema 2020, eq. 1: A = 0.5 W + 0.5 I per layer, W the heads' mean; the layers
    multiplied from the last down), computed here in torch over the attentions `transformers` itself
    returns for the same tokens, against the served /attention rollout."""
    import torch
    import transformers

    async with serving(tiny_hf_bundle) as (_, http):
        served = (await post(http, "/attention", {"inputs": TEXTS[1], "aggregation": "rollout"})).json()["data"][0]
    ids = torch.tensor([[t["id"] for t in served["tokens"]]])
    reference = transformers.AutoModel.from_pretrained(tiny_hf_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        layers = reference(input_ids=ids, output_attentions=True).attentions  # L x (1, H, n, n)
    n = ids.shape[1]
    per_layer = [0.5 * a[0].double().mean(0) + 0.5 * torch.eye(n, dtype=torch.float64) for a in layers]
    expected = torch.linalg.multi_dot(per_layer[::-1]) if len(per_layer) > 1 else per_layer[0]
    np.testing.assert_allclose(np.array(served["attention"]), expected.numpy(), atol=1e-5)


@pytest.mark.parametrize(("dtype", "np_dtype", "atol"), [("float32", "<f4", 1e-6), ("float16", "<f2", 1e-3)])
async def test_attention_base64(client, dtype, np_dtype, atol):
    plain = (await post(client, "/attention", {"inputs": TEXTS[0]})).json()["data"][0]
    packed = (await post(client, "/attention", {"inputs": TEXTS[0], "encoding": "base64", "dtype": dtype})).json()
    item = packed["data"][0]
    assert packed["dtype"] == dtype
    decoded = np.frombuffer(base64.b64decode(item["attention"]), dtype=np_dtype).reshape(item["shape"])
    np.testing.assert_allclose(decoded, np.array(plain["attention"]), atol=atol)


async def test_tokenize_gives_ids_text_and_offsets(client):
    text = "a warm film"
    tokens = (await post(client, "/tokenize", {"inputs": [text]})).json()[0]
    assert tokens[0]["special"] and tokens[-1]["special"]
    words = [t for t in tokens if not t["special"]]
    assert text[words[0]["start"]:words[0]["stop"]] == "a"
    bare = (await post(client, "/tokenize", {"inputs": text, "add_special_tokens": False})).json()[0]
    assert len(bare) == len(tokens) - 2


async def test_ops_routes(client):
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).json() == {"status": "ready"}
    info = (await client.get("/info")).json()
    assert info["provider"] == "cpu" and info["variants"] == {"fast": "fp32", "attention": "fp32"}
    assert info["variant"]["served"] == "fp32"  # the tiny bundle has fp32 only: nothing to time, invariance measured
    assert info["variant"]["reason"] == "the one fast graph for cpu in this bundle, batch-invariant"
    assert info["labels"] == ["neg", "pos"] and len(info["tokenizer_sha256"]) == 64
    assert all(len(g["sha256"]) == 64 for g in info["graphs"]) and info["limits"]["max_inputs"] == 256
    models = (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == info["model"]
    await post(client, "/embed", {"inputs": "x"})
    metrics = (await client.get("/metrics")).text
    for name in ("attnserve_requests_total", "attnserve_queue_depth", "attnserve_batch_size",
                 "attnserve_batch_tokens", "attnserve_tokenize_duration_seconds", "attnserve_queue_duration_seconds",
                 "attnserve_inference_duration_seconds", "attnserve_model_runs_total"):
        assert name in metrics
    assert 'attnserve_requests_total{caller="",model="tiny",route="/embed",status="200"} 1.0' in metrics


async def test_openapi_documents_every_error_status(client):
    spec = (await client.get("/openapi.json")).json()
    for path in ("/embed", "/classify", "/attention", "/v1/embeddings"):
        responses = spec["paths"][path]["post"]["responses"]
        assert {"200", "401", "413", "415", "422", "429", "500", "503", "504"} <= set(responses), path
        assert responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")


async def test_concurrent_requests_are_batched(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around, cache_bytes=0) as (app, client):  # repeats queue
        batcher = app.state.models.default.batcher
        runs_before = graph_runs(app)
        async with held(app, client) as plug:
            tasks = [asyncio.create_task(client.post("/embed", json={"inputs": t})) for t in TEXTS * 5]
            await until(lambda: batcher.depth == len(tasks))
        responses = await asyncio.gather(plug, *tasks)
        assert all(r.status_code == 200 for r in responses)
        assert graph_runs(app) - runs_before == 2  # the plug, then all the others as one batch
