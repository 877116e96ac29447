"""The other heads of a retrieval stack, served, against their references: the random-weight transformers
models of tests/helpers/heads.py (exported once per session), served together in one app, and compared with
transformers itself on the same weights and tokenizer.json.

Scores to max abs 1e-5, the same nonzero indices for sparse vectors, identical entity groups; the Cohere SDK
pointed at a real server; TEI's /rerank shape; a 5,000-token document ranked by its best window, with
`explain` spans inside it; a task the model lacks is a 422 naming its tasks, a route no model can answer
a 404, left out of the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest
import pytest_asyncio
import torch
import transformers

from bundle.manifest import Manifest
from model.heads import sparse_vector
from tests.helpers.families import MAX_POSITIONS
from tests.helpers.heads import Case, token_types
from tests.helpers.serving import assert_error, serving, uvicorn_here
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
QUERY = "Café crème à Zürich"
DOCUMENTS = MULTILINGUAL[1:]
CROSS_ENCODERS = ["bert-ce", "xlmr-ce", "modernbert-ce"]  # token types; the RoBERTa family's template; ModernBERT's
MASKED_LMS = ["bert-mlm", "xlmr-mlm"]
TOKEN_CLASSIFIERS = ["bert-ner", "xlmr-ner"]


@pytest.fixture(scope="module")
def cases(head_bundles: dict[str, Case]) -> dict[str, Case]:
    return head_bundles


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(cases: dict[str, Case]) -> AsyncIterator[httpx.AsyncClient]:
    """One app serving all four models (each its own task), named by the case."""
    async with serving([f"{name}={case.bundle}" for name, case in cases.items()], max_queue=4096) as (_, http):
        yield http


def _pairs(case: Case, query: str, documents: list[str]) -> np.ndarray:
    return case.logits([query] * len(documents), documents)[:, 0].numpy()


# -- rerank and pair scores ----------------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", CROSS_ENCODERS)
async def test_rerank_scores_equal_transformers(cases, client, name):
    expected = _pairs(cases[name], QUERY, DOCUMENTS)  # (N,) logits
    response = await client.post("/rerank", json={"model": name, "query": QUERY, "texts": DOCUMENTS,
                                                  "raw_scores": True, "return_text": True})
    assert response.status_code == 200, response.text
    ranked = response.json()
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)  # TEI: best first
    assert set(ranked[0]) == {"index", "score", "text"}  # TEI's Rank, text as asked
    got = np.array([r["score"] for r in sorted(ranked, key=lambda r: r["index"])])
    assert np.abs(got - expected).max() <= TOLERANCE
    assert all(r["text"] == DOCUMENTS[r["index"]] for r in ranked)
    sigmoid = (await client.post("/rerank", json={"model": name, "query": QUERY, "texts": DOCUMENTS})).json()
    got = np.array([r["score"] for r in sorted(sigmoid, key=lambda r: r["index"])])
    assert np.abs(got - 1 / (1 + np.exp(-expected))).max() <= TOLERANCE  # sentence-transformers' CrossEncoder
    assert "text" not in sigmoid[0]
    alone = await client.post("/rerank", json={"model": name, "query": QUERY, "texts": DOCUMENTS[-1:],
                                               "raw_scores": True})  # a second shape: one pair, no padding
    assert abs(alone.json()[0]["score"] - float(expected[-1])) <= TOLERANCE


@pytest.mark.asyncio(loop_scope="module")
async def test_pairs_join_the_batch_with_their_token_types(cases, client):
    """BERT's segment B changes the score: the pair is not the two texts concatenated as one segment."""
    case = cases["bert-ce"]
    joined = case.logits([f"{QUERY} [SEP] {d}" for d in DOCUMENTS])[:, 0].numpy()  # segment A only
    response = await client.post("/score", json={"model": "bert-ce", "text_1": QUERY, "text_2": DOCUMENTS})
    body = response.json()
    assert (body["object"], [d["index"] for d in body["data"]]) == ("list", list(range(len(DOCUMENTS))))
    assert body["usage"]["prompt_tokens"] > 0 and body["data"][0]["object"] == "score"
    got = np.array([d["score"] for d in body["data"]])
    expected = 1 / (1 + np.exp(-_pairs(case, QUERY, DOCUMENTS)))
    assert np.abs(got - expected).max() <= TOLERANCE
    assert np.abs(got - 1 / (1 + np.exp(-joined))).max() > 100 * TOLERANCE
    pairwise = await client.post("/score", json={"model": "bert-ce", "text_1": DOCUMENTS[:2], "text_2": DOCUMENTS[:3]})
    assert_error(pairwise, 422)


@pytest.mark.asyncio(loop_scope="module")
async def test_predict_takes_pairs_as_tei_does(cases, client):
    case = cases["bert-ce"]
    one = await client.post("/predict", json={"model": "bert-ce", "inputs": [QUERY, DOCUMENTS[0]],
                                              "raw_scores": True})
    assert one.status_code == 200, one.text
    assert abs(one.json()[0]["score"] - float(_pairs(case, QUERY, DOCUMENTS[:1])[0])) <= TOLERANCE
    batch = await client.post("/predict", json={"model": "bert-ce", "raw_scores": True,
                                                "inputs": [[QUERY, DOCUMENTS[0]], [DOCUMENTS[1]]]})
    scores = [item[0]["score"] for item in batch.json()]
    assert abs(scores[1] - float(case.logits([DOCUMENTS[1]])[0, 0])) <= TOLERANCE  # a lone text, unpaired


@pytest.mark.asyncio(loop_scope="module")
async def test_cohere_and_jina_shapes(client):
    body = {"model": "bert-ce", "query": QUERY, "documents": [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2]],
            "top_n": 2, "return_documents": True}
    for path in ("/v1/rerank", "/v2/rerank"):
        response = await client.post(path, json=body)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert len(results) == 2 and results[0]["relevance_score"] >= results[1]["relevance_score"]
        assert all(r["document"]["text"] == [DOCUMENTS[0], DOCUMENTS[1], DOCUMENTS[2]][r["index"]] for r in results)
        assert response.json()["usage"]["total_tokens"] > 0
    bad = await client.post("/v2/rerank", json={"model": "bert-ce", "query": QUERY, "documents": []})
    assert_error(bad, 422)  # the one error shape under /v2/rerank, not the inference protocol's


@pytest.mark.asyncio(loop_scope="module")
async def test_the_cohere_sdk_reranks_against_the_server(cases):
    cohere = pytest.importorskip("cohere")
    async with uvicorn_here(cases["bert-ce"].bundle) as (_, url):
        v1 = cohere.AsyncClient(api_key="unused", base_url=url)
        answer = await v1.rerank(query=QUERY, documents=DOCUMENTS, top_n=3, model="bert-ce", return_documents=True)
        v2 = cohere.AsyncClientV2(api_key="unused", base_url=url)
        answer2 = await v2.rerank(model="bert-ce", query=QUERY, documents=DOCUMENTS, top_n=3)
    expected = 1 / (1 + np.exp(-_pairs(cases["bert-ce"], QUERY, DOCUMENTS)))
    for result in (answer, answer2):
        scores = [r.relevance_score for r in result.results]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert max(abs(r.relevance_score - expected[r.index]) for r in result.results) <= TOLERANCE
        assert min(scores) >= np.sort(expected)[-3] - TOLERANCE  # the three best
    assert answer.results[0].document.text == DOCUMENTS[answer.results[0].index]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", CROSS_ENCODERS)
async def test_a_long_document_ranks_by_its_best_window_and_explains_inside_it(cases, client, name):
    """A document of 5,000 tokens: its score is its best window's, the window's span points into it, and the
    explanation's spans lie inside that window."""
    case = cases[name]
    unit = "the quick brown fox jumps over the lazy dog"
    filler = " ".join([unit] * (2600 // len(case.tokenizer(unit, add_special_tokens=False)["input_ids"])))
    long_doc = filler + " café crème à zürich " + filler  # each vocabulary cuts it into 5,000 tokens or more
    assert 5000 < len(case.tokenizer(long_doc)["input_ids"]) < 7000
    response = await client.post("/rerank", json={"model": name, "query": QUERY, "raw_scores": True,
                                                  "texts": [long_doc, DOCUMENTS[0]], "chunking": "max",
                                                  "chunk_overlap": 8, "explain": True})
    assert response.status_code == 200, response.text
    first = next(r for r in response.json() if r["index"] == 0)
    window = first["window"]
    assert 0 <= window["start"] < window["stop"] <= len(long_doc) and window["tokens"] > 0
    assert min(abs(first["score"] - logit) for logit in _window_logits(case, QUERY, long_doc, window)) <= TOLERANCE
    explained = first["explanation"]
    assert len(explained) == window["tokens"]
    assert all(window["start"] <= h["start"] < h["stop"] <= window["stop"] for h in explained)
    assert all(0 <= h["weight"] <= 1 for h in explained) and sum(h["weight"] for h in explained) < 1
    whole = await client.post("/rerank", json={"model": name, "query": QUERY, "texts": [long_doc],
                                               "raw_scores": True, "truncate": True})
    assert first["score"] >= whole.json()[0]["score"] - TOLERANCE  # the best window beats the cut-off head


@pytest.mark.asyncio(loop_scope="module")
async def test_a_rerank_overlap_is_held_to_the_pair_window_chunked_or_not(cases):
    """The served OpenAPI document's bound on chunk_overlap (the document tokens a pair's window holds after
    the longest query) holds whether or not the request chunks, as /embed's does."""
    async with serving(cases["bert-ce"].bundle) as (_, http):
        schemas = (await http.get("/openapi.json")).json()["components"]["schemas"]
        most = schemas["RerankRequest"]["properties"]["chunk_overlap"]["maximum"]
        assert most == schemas["CohereRerankRequest"]["properties"]["chunk_overlap"]["maximum"]
        for chunking in (None, "max"):
            body = {"query": QUERY, "texts": DOCUMENTS[:1], "chunking": chunking}
            assert (await http.post("/rerank", json={**body, "chunk_overlap": most})).status_code == 200
            assert_error(await http.post("/rerank", json={**body, "chunk_overlap": most + 1}), 422)
            cohere = {"query": QUERY, "documents": DOCUMENTS[:1], "chunking": chunking, "chunk_overlap": most + 1}
            assert_error(await http.post("/v1/rerank", json=cohere), 422)


def _window_logits(case: Case, query: str, document: str, window: dict[str, int]) -> list[float]:
    """transformers' logits of the query and the document's tokens inside the window in the model's pair
    template ([CLS] A [SEP] B [SEP] with segments, <s> A </s></s> B </s>): the window's tokens are the run of
    `tokens` document tokens from `start` to `stop` (a Unigram vocabulary's lone "▁" shares its offsets with
    the next token, so a span may name two runs: the score is the closer one's)."""
    whole = case.tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets, k = whole["input_ids"], whole["offset_mapping"], window["tokens"]
    runs = [ids[i:i + k] for i in range(len(ids) - k + 1)
            if offsets[i][0] == window["start"] and offsets[i + k - 1][1] == window["stop"]]
    assert runs, window
    return [_pair_logit(case, query, inside) for inside in runs]


def _pair_logit(case: Case, query: str, inside: list[int]) -> float:
    first = case.tokenizer(query, add_special_tokens=False)["input_ids"]
    cls, sep = case.tokenizer.cls_token_id, case.tokenizer.sep_token_id
    middle = [sep, sep] if case.arch == "xlm-roberta" else [sep]  # transformers' pair templates
    feeds = {"input_ids": torch.tensor([[cls, *first, *middle, *inside, sep]])}
    if case.arch == "bert":  # segment B after the first [SEP]
        feeds["token_type_ids"] = torch.tensor([[0] * (len(first) + 2) + [1] * (len(inside) + 1)])
    elif token_types(case.model):  # the RoBERTa family's template: every token type 0
        feeds["token_type_ids"] = torch.zeros_like(feeds["input_ids"])
    with torch.no_grad():
        return float(case.model(**feeds).logits[0, 0])


# -- sparse vectors ------------------------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", MASKED_LMS)
async def test_sparse_vectors_equal_splade_over_transformers(cases, client, name):
    case = cases[name]
    feeds = case.tokenizer(MULTILINGUAL, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = sparse_vector(case.model(**feeds).logits, feeds["attention_mask"]).numpy()  # (N, V)
    for rows in (slice(None), slice(2, 3)):  # a padded batch and one text alone
        response = await client.post("/embed_sparse", json={"model": name, "inputs": MULTILINGUAL[rows]})
        assert response.status_code == 200, response.text
        for row, entries in zip(expected[rows], response.json(), strict=True):
            assert [e["index"] for e in entries] == np.flatnonzero(row > 0).tolist()
            assert max(abs(e["value"] - row[e["index"]]) for e in entries) <= TOLERANCE
    top = (await client.post("/embed_sparse", json={"model": name, "inputs": MULTILINGUAL[0], "top_k": 3})).json()
    best = sorted(np.argsort(-expected[0], kind="stable")[:3].tolist())
    assert [e["index"] for e in top[0]] == best


# -- token labels --------------------------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("aggregation", ["none", "simple", "first", "average", "max"])
@pytest.mark.parametrize("name", TOKEN_CLASSIFIERS)
async def test_token_labels_equal_the_pipeline(cases, client, name, aggregation):
    case = cases[name]
    pipe = transformers.pipeline("token-classification", model=case.model, tokenizer=case.tokenizer,
                                 aggregation_strategy=aggregation, device="cpu")
    response = await client.post("/classify_tokens", json={"model": name, "inputs": MULTILINGUAL,
                                                           "aggregation": aggregation})
    assert response.status_code == 200, response.text
    alone = await client.post("/classify_tokens", json={"model": name, "inputs": MULTILINGUAL[-1:],
                                                        "aggregation": aggregation})  # one text: no padding
    assert _same(alone.json()[0], response.json()[-1])
    key = "entity" if aggregation == "none" else "entity_group"
    for text, got in zip(MULTILINGUAL, response.json(), strict=True):
        expected = pipe(text)
        assert [(g[key], g["word"], g["start"], g["end"]) for g in got] == \
            [(e[key], e["word"], e["start"], e["end"]) for e in expected]
        assert all(abs(g["score"] - float(e["score"])) <= TOLERANCE for g, e in zip(got, expected, strict=True))
        if aggregation == "none":
            assert [g["index"] for g in got] == [e["index"] for e in expected]


def _same(one: list[dict], other: list[dict]) -> bool:
    """The same entities, scores to the tolerance."""
    return len(one) == len(other) and all(
        {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"}
        and abs(a["score"] - b["score"]) <= TOLERANCE for a, b in zip(one, other, strict=True))


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", TOKEN_CLASSIFIERS)
async def test_a_long_text_is_labelled_window_by_window(cases, client, name):
    """Each token of a text much longer than the model takes is labelled, by the window where it sits most
    centrally: a word's label far inside the text equals the label it gets in a short text of its own
    neighbourhood, and offsets point into the long text."""
    text = " ".join(MULTILINGUAL * 6)
    response = await client.post("/classify_tokens", json={"model": name, "inputs": text, "chunk_overlap": 16})
    assert response.status_code == 200, response.text
    labelled = response.json()[0]
    whole = (await client.post("/tokenize", json={"model": name, "inputs": text})).json()[0]
    assert len(whole) > 4 * MAX_POSITIONS and labelled[-1]["index"] > 3 * MAX_POSITIONS
    indices = [t["index"] for t in labelled]
    assert indices == sorted(set(indices))
    for t in labelled:  # each labelled token is the text's own token at that position, offsets and all
        token = whole[t["index"]]
        assert (token["start"], token["stop"]) == (t["start"], t["end"])
        assert t["word"] in (token["text"], text[t["start"]:t["end"]])


# -- every head in one server --------------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
async def test_each_model_names_its_tasks_and_refuses_others(client):
    listed = {m["id"]: m["tasks"] for m in (await client.get("/v1/models")).json()["data"]}
    assert "rerank" in listed["bert-ce"] and "sparse" in listed["bert-mlm"] and "tokens" in listed["bert-ner"]
    info = {m["name"]: m for m in (await client.get("/info")).json()["models"]}
    assert info["bert-ner"]["task"] == "tokens" and info["bert-ner"]["tasks"] == listed["bert-ner"]
    refused = await client.post("/rerank", json={"model": "bert-mlm", "query": "a", "texts": ["b"]})
    body = assert_error(refused, 422, "unsupported")
    assert "cannot rerank" in body["message"] and "sparse" in body["message"]
    assert_error(await client.post("/embed_sparse", json={"model": "bert-ce", "inputs": "a"}), 422, "unsupported")
    assert_error(await client.post("/classify", json={"model": "bert-ner", "inputs": "a"}), 422, "unsupported")


@pytest.mark.asyncio(loop_scope="module")
async def test_routes_no_model_can_answer_are_404_and_left_out_of_openapi(cases):
    async with serving(cases["bert-mlm"].bundle) as (_, http):
        for path in ("/rerank", "/v1/rerank", "/score", "/classify_tokens"):
            assert_error(await http.post(path, json={}), 404)
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert "/embed_sparse" in paths and "/rerank" not in paths and "/classify_tokens" not in paths


def test_parity_gates_cover_each_head_and_pairs(cases):
    for case in cases.values():
        manifest = Manifest.read(case.bundle)
        fast = manifest.graph("fast", "fp32")
        assert fast is not None and all(v <= TOLERANCE for k, v in fast.parity.items() if k.endswith("diff"))
        takes_types = "token_type_ids" in [i.name for i in fast.inputs]
        assert takes_types == token_types(case.model)


@pytest.mark.asyncio(loop_scope="module")
async def test_sparse_vectors_on_the_inference_protocol(cases, client):
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": MULTILINGUAL[:2]}],
            "outputs": [{"name": "sparse"}]}
    response = await client.post("/v2/models/bert-mlm/infer", json=body)
    assert response.status_code == 200, response.text
    (tensor,) = response.json()["outputs"]
    vocab = cases["bert-mlm"].model.config.vocab_size
    assert (tensor["name"], tensor["shape"]) == ("sparse", [2, vocab])
    dense = np.asarray(tensor["data"], dtype=np.float32).reshape(2, vocab)
    served = (await client.post("/embed_sparse", json={"model": "bert-mlm", "inputs": MULTILINGUAL[:2]})).json()
    for row, entries in zip(dense, served, strict=True):
        assert np.flatnonzero(row).tolist() == [e["index"] for e in entries]
    metadata = (await client.get("/v2/models/bert-ner")).json()
    assert "logits" not in [o["name"] for o in metadata["outputs"]]  # a token classifier has no sequence logits
