"""text-embeddings-inference's remaining routes (/predict, /similarity, /embed_all, /decode, POST /) with
TEI's request and response shapes, checked against /embed, /classify and eager PyTorch, and driven by
`huggingface_hub.InferenceClient` (what LangChain's and LlamaIndex's TEI integrations call) against a real
server process."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import pytest_asyncio

from service.app import ADMITTED_PATHS, create_app
from service.settings import Settings
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import assert_error, graph_runs, serving, until

TEXTS = ["a warm and funny film", "the plot makes no sense at all", "dull"]
NEW_ROUTES = ("/predict", "/similarity", "/embed_all", "/decode", "/")


@pytest_asyncio.fixture(loop_scope="function")
async def client(tiny_bundle):
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        yield client


async def post(client, path, payload, status=200):
    response = await client.post(path, json=payload)
    assert response.status_code == status, response.text
    return response.json()


def raw_logits(rows: list[list[dict]]) -> np.ndarray:
    """Per input, the scores of neg and pos: (N, 2)."""
    return np.array([[next(s["score"] for s in row if s["label"] == label) for label in ("neg", "pos")]
                     for row in rows])


async def test_predict_answers_a_text_with_one_list_and_a_batch_with_one_list_each(client):
    # like for like: the same inputs run in the same batch shape, so the floats are the same bits
    one = await post(client, "/classify", {"inputs": TEXTS[0]})
    assert await post(client, "/predict", {"inputs": TEXTS[0]}) == one[0]
    assert await post(client, "/predict", {"inputs": [TEXTS[0]]}) == one[0]
    assert await post(client, "/predict", {"inputs": [[t] for t in TEXTS]}) == await post(client, "/classify",
                                                                                            {"inputs": TEXTS})
    pair = await post(client, "/predict", {"inputs": TEXTS[:2]})  # a sentence pair: one list, as TEI answers
    assert sorted(s["label"] for s in pair) == sorted(s["label"] for s in one[0])
    assert_error(await client.post("/predict", json={"inputs": TEXTS[:3]}), 422, "validation_error")  # not a pair


async def test_predict_scores_raw_sigmoid_and_top_k(client):
    logits = raw_logits(await post(client, "/classify", {"inputs": TEXTS, "raw_scores": True}))
    batch = [[t] for t in TEXTS]
    assert np.allclose(raw_logits(await post(client, "/predict", {"inputs": batch, "raw_scores": True})), logits)
    sigmoid = await post(client, "/predict", {"inputs": batch, "parameters": {"function_to_apply": "sigmoid"}})
    np.testing.assert_allclose(raw_logits(sigmoid), 1 / (1 + np.exp(-logits)), rtol=1e-6)
    none = await post(client, "/predict", {"inputs": batch, "raw_scores": False,
                                           "parameters": {"function_to_apply": "none"}})
    np.testing.assert_allclose(raw_logits(none), logits, rtol=1e-6)
    top = await post(client, "/predict", {"inputs": TEXTS[0], "parameters": {"top_k": 1}})
    assert len(top) == 1 and top[0]["label"] == ("neg", "pos")[int(np.argmax(logits[0]))]


async def test_similarity_is_the_cosine_of_the_embeddings(client):
    vectors = np.array(await post(client, "/embed", {"inputs": TEXTS, "normalize": False}))
    expected = [float(vectors[0] @ v / (np.linalg.norm(vectors[0]) * np.linalg.norm(v))) for v in vectors[1:]]
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}
    np.testing.assert_allclose(await post(client, "/similarity", body), expected, atol=1e-6)
    np.testing.assert_allclose(await post(client, "/", {**body, "parameters": {"truncate": True}}), expected, atol=1e-6)
    empty = await client.post("/similarity", json={"inputs": {"source_sentence": "x", "sentences": []}})
    assert_error(empty, 422, "validation_error")


async def test_similarity_counts_the_source_against_the_input_limit(tiny_bundle):
    async with serving(tiny_bundle, intra_op_threads=1, max_inputs=3) as (_, client):
        body = {"inputs": {"source_sentence": "x", "sentences": ["a", "b", "c"]}}
        assert_error(await client.post("/similarity", json=body), 422, "too_many_inputs")


async def test_root_embeds_as_embed_does(client):
    for body in ({"inputs": TEXTS}, {"inputs": TEXTS[0], "normalize": False, "dimensions": 8},
                 {"inputs": TEXTS[0] * 40, "chunking": "windows"}):
        assert await post(client, "/", body) == await post(client, "/embed", body)
    assert_error(await client.post("/", json={"inputs": 3}), 422, "validation_error")
    assert_error(await client.post("/", json={"inputs": {"sentences": ["a"]}}), 422, "validation_error")


async def test_embed_all_equals_eager_pytorch_token_states(client, tiny_checkpoint):
    import torch

    from model.load import load_model
    from model.tokenizer import encode

    loaded = load_model(tiny_checkpoint)
    answer = await post(client, "/embed_all", {"inputs": TEXTS})
    tokens = await post(client, "/tokenize", {"inputs": TEXTS})
    for text, vectors, toks in zip(TEXTS, answer, tokens, strict=True):
        input_ids, mask = encode(loaded.tokenizer, [text], 64)
        with torch.no_grad():
            states = loaded.encoder(input_ids, mask).token_states[0].numpy()  # (n, D)
        assert len(vectors) == len(toks) == states.shape[0]
        np.testing.assert_allclose(np.array(vectors), states, atol=1e-5)
    pooled = np.array(await post(client, "/embed", {"inputs": TEXTS[0], "normalize": False}))[0]
    np.testing.assert_allclose(np.mean(answer[0], axis=0), pooled, atol=1e-5)  # mean pooling over every token


async def test_embed_all_is_refused_over_its_cap_before_any_work(tiny_bundle):
    async with serving(tiny_bundle, intra_op_threads=1, embed_all_cap_bytes=4096) as (app, client):
        runs = graph_runs(app)
        error = assert_error(await client.post("/embed_all", json={"inputs": TEXTS}), 422, "response_too_large")
        assert "ATTNSERVE_EMBED_ALL_CAP_BYTES" in error["message"]
        assert graph_runs(app) == runs
        assert len(await post(client, "/embed_all", {"inputs": "dull"})) == 1


async def test_decode_inverts_tokenize(client):
    tokens = await post(client, "/tokenize", {"inputs": TEXTS})
    ids = [[t["id"] for t in row] for row in tokens]
    assert await post(client, "/decode", {"ids": ids}) == TEXTS
    assert await post(client, "/decode", {"ids": ids[0]}) == TEXTS[:1]
    kept = await post(client, "/decode", {"ids": ids[2], "skip_special_tokens": False})
    assert kept == ["[CLS] dull [SEP]"]
    assert_error(await client.post("/decode", json={"ids": [10**6]}), 422, "out_of_range")
    assert_error(await client.post("/decode", json={"ids": []}), 422, "validation_error")


SHAPES = {  # texts -> the route's body
    "/predict": lambda texts: {"inputs": [[t] for t in texts]},
    "/similarity": lambda texts: {"inputs": {"source_sentence": texts[0], "sentences": texts[1:]}},
}
HOSTILE = {  # name -> (texts, expected status, code)
    "too_many_inputs": (["a"] * 5, 422, "too_many_inputs"),
    "over_max_chars": (["a", "b" * 101], 422, "input_too_long"),
    "non_string_item": (["a", 5], 422, "validation_error"),
    "null_item": (["a", None], 422, "validation_error"),
    "lone_surrogate": (["a", "b\ud800"], 422, "validation_error"),  # sent as the JSON escape
    "nul_characters": (["a\x00b", "\x00" * 3], 200, None),
}


@pytest.mark.parametrize("path", sorted(SHAPES))
@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_inputs_get_their_status_before_any_work(tiny_bundle, path, case):
    texts, status, code = HOSTILE[case]
    async with serving(tiny_bundle, intra_op_threads=1, max_inputs=4, max_input_chars=100) as (app, client):
        runs = graph_runs(app)
        sent = json.dumps(SHAPES[path](texts)).encode()  # ASCII, escapes as JSON writes them
        response = await client.post(path, content=sent, headers={"content-type": "application/json"})
        if status == 200:
            assert response.status_code == 200, response.text
        else:
            assert_error(response, status, code)
            assert graph_runs(app) == runs
        wrong_type = await client.post(path, content=b"inputs=a", headers={"content-type": "text/plain"})
        assert_error(wrong_type, 415, "unsupported_media_type")


async def test_decode_refuses_hostile_ids(tiny_bundle):
    async with serving(tiny_bundle, intra_op_threads=1, max_inputs=2) as (_, client):
        for ids, code in (([[1], [2], [3]], "too_many_inputs"), ([-1], "validation_error"),
                          ([True], "validation_error"), ([1.5], "validation_error"), ([[1], []], "validation_error"),
                          ("1 2", "validation_error")):
            assert_error(await client.post("/decode", json={"ids": ids}), 422, code)
        assert (await client.post("/decode", json={"ids": [2.0, 5]})).status_code == 200  # JSON's integer 2


@pytest.mark.parametrize("path", ["/predict", "/similarity", "/embed_all", "/"])
async def test_new_inference_routes_are_refused_early_when_the_queue_is_full(tiny_bundle, path):
    assert path in ADMITTED_PATHS
    body = {"inputs": {"source_sentence": "a", "sentences": ["b"]}} if path == "/similarity" else {"inputs": "a"}
    async with serving(tiny_bundle, wrap=GatedBundle.around, intra_op_threads=1, max_queue=2) as (app, client):
        async with held(app, client) as plug:
            queued = asyncio.create_task(client.post("/embed", json={"inputs": "b"}))
            await until(lambda: app.state.models.default.batcher.full)  # the plug and one queued input
            refused = await client.post(path, json=body)
        assert_error(refused, 429, "overloaded")
        assert (await plug).status_code == (await queued).status_code == 200
        assert (await client.post(path, json=body)).status_code == 200


def test_openapi_documents_the_new_routes_and_fields():
    doc = create_app(Settings(bundle="unused")).openapi()
    batched = {"200", "401", "403", "404", "408", "413", "415", "422", "429", "500", "503", "504"}  # 403, 404: model
    for path in ("/predict", "/similarity", "/embed_all", "/"):
        assert set(doc["paths"][path]["post"]["responses"]) == batched, path
    assert set(doc["paths"]["/decode"]["post"]["responses"]) == batched - {"429", "504"}
    for model in ("EmbedRequest", "ClassifyRequest", "OpenAIEmbeddingRequest"):
        properties = doc["components"]["schemas"][model]["properties"]
        assert properties["chunk_overlap"]["minimum"] == 0 and properties["chunk_overlap"]["type"] == "integer"
        assert {"mean", "windows"} == set(properties["chunking"]["anyOf"][0]["enum"])


# -- huggingface_hub.InferenceClient against a real server ------------------------------------------
@pytest.fixture(scope="module")
def hub_client():
    from huggingface_hub import InferenceClient

    return InferenceClient


def test_inference_client_at_the_root_embeds_and_compares(live_server, hub_client):
    import httpx

    root = hub_client(model=live_server)
    vector = root.feature_extraction(TEXTS[0])
    expected = np.array(httpx.post(f"{live_server}/embed", json={"inputs": TEXTS[0]}).json())
    assert vector.shape == (1, 32)
    np.testing.assert_allclose(vector, expected, atol=1e-6)
    np.testing.assert_allclose(hub_client(model=f"{live_server}/embed").feature_extraction(TEXTS),
                               httpx.post(f"{live_server}/embed", json={"inputs": TEXTS}).json(), atol=1e-6)
    scores = root.sentence_similarity(TEXTS[0], other_sentences=TEXTS)
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS}}
    np.testing.assert_allclose(scores, httpx.post(f"{live_server}/similarity", json=body).json(), atol=1e-6)
    assert scores[0] == pytest.approx(1.0, abs=1e-6)


def test_inference_client_at_predict_classifies(live_server, hub_client):
    import httpx

    result = hub_client(model=f"{live_server}/predict").text_classification(TEXTS[0])
    best = httpx.post(f"{live_server}/classify", json={"inputs": TEXTS[0]}).json()[0][0]
    # huggingface_hub keeps the first element of the answer; TEI answers one text with one list, best first
    assert (result.label, result.score) == (best["label"], pytest.approx(best["score"], abs=1e-6))
