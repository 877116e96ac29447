"""A multi-vector model served: a random bge-m3 (tests.helpers.bge_m3) beside a plain bundle, over HTTP. Jina's
/v1/multi-vector gives BGEM3FlagModel's colbert_vecs (float and base64, cut to `dimensions`), /embed_sparse its
lexical weights, /v2 all three from one graph run (counted), the rerank routes and /score its colbert_score
(MaxSim, averaged over the query's tokens as bge-m3 does; a long document by its best window), `explain` each
query token's best document token, /maxsim the whole map; the answer-size cap refuses before any run; a model
without multi-vector outputs is refused with what it can do.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from inference.runtime.graphs import MULTI, BatchKind, TokenSequence
from inference.runtime.loading import LoadedBundle
from tests.helpers import bge_m3
from tests.helpers.fakes import GatedBundle
from tests.helpers.serving import assert_error, post_ok, serving, worst

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
TEXTS = [*bge_m3.TEXTS[:4], bge_m3.UNKNOWN, bge_m3.TEXTS[-1]]  # 1 to ~40 tokens, one with <unk>s
QUERY = bge_m3.QUERY
DOCUMENTS = [bge_m3.DOCUMENT, *bge_m3.TEXTS[:3], bge_m3.UNKNOWN]


@pytest.fixture(scope="module")
def source(bge_m3_tiny: tuple[Path, Path]) -> Path:
    return bge_m3_tiny[0]  # with its bundle, exported once per session (tests/fixtures.py)


@pytest.fixture(scope="module")
def reference(source: Path) -> Any:
    return bge_m3.reference_model(source)


@pytest.fixture(scope="module")
def expected(reference: Any) -> dict[str, Any]:
    return bge_m3.encode_reference(reference, [*TEXTS, QUERY, *DOCUMENTS], 64)


@dataclasses.dataclass
class Counting(GatedBundle):
    """The real bundle, recording the kind of each graph run."""

    kinds: list[BatchKind] = dataclasses.field(default_factory=list)

    def run_batch(self, kind: BatchKind, sequences: list[TokenSequence], adapters: Sequence[int] | None = None) -> Any:
        self.kinds.append(kind)
        return super().run_batch(kind, sequences, adapters)


@pytest.fixture(scope="module")
def runs() -> dict[str, Counting]:
    return {}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(bge_m3_tiny: tuple[Path, Path], tiny_plain_bundle: Path,
                 runs: dict[str, Counting]) -> AsyncIterator[httpx.AsyncClient]:
    """bge-m3 first (fp32, with its attention graph), a plain bundle second; each bundle's runs counted."""
    bundle = bge_m3_tiny[1]

    def counting(loaded: LoadedBundle) -> Counting:
        fake = Counting(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedBundle)})
        fake.gate.set()
        runs[loaded.manifest.name] = fake
        return fake

    async with serving([f"m3={bundle}", f"plain={tiny_plain_bundle}"], counting, intra_op_threads=1) as (_, served):
        yield served


def _vectors(expected: dict[str, Any], start: int, count: int) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float32) for v in expected["colbert_vecs"][start:start + count]]


async def test_multi_vector_gives_flagembeddings_colbert_vectors(client, expected) -> None:
    for input_type in ("document", "query"):  # bge-m3 treats both alike
        answer = await post_ok(client, "/v1/multi-vector", {"input": TEXTS, "input_type": input_type})
        assert [d["index"] for d in answer["data"]] == list(range(len(TEXTS)))
        for item, want in zip(answer["data"], _vectors(expected, 0, len(TEXTS)), strict=True):
            assert worst(item["embeddings"], want) <= TOLERANCE
        assert answer["usage"]["total_tokens"] == sum(len(v) + 1 for v in _vectors(expected, 0, len(TEXTS)))  # and <s>
        assert answer["model"] == "m3" and answer["object"] == "list"


async def test_base64_and_dimensions(client, expected) -> None:
    answer = await post_ok(client, "/v1/multi-vector", {"input": TEXTS[0], "embedding_type": "base64"})
    rows = [np.frombuffer(base64.b64decode(row), dtype="<f4") for row in answer["data"][0]["embeddings"]]
    assert worst(np.stack(rows), _vectors(expected, 0, 1)[0]) <= TOLERANCE
    cut = await post_ok(client, "/v1/multi-vector", {"input": TEXTS[0], "dimensions": 8})
    full = _vectors(expected, 0, 1)[0][:, :8]
    assert worst(cut["data"][0]["embeddings"], full / np.linalg.norm(full, axis=1, keepdims=True)) <= TOLERANCE
    assert_error(await client.post("/v1/multi-vector", json={"input": "x", "dimensions": 33}), 422)


async def test_embed_sparse_gives_the_lexical_weights(client, expected) -> None:
    answer = await post_ok(client, "/embed_sparse", {"inputs": TEXTS, "model": "m3"})
    for got, want in zip(answer, expected["lexical_weights"][:len(TEXTS)], strict=True):
        ids = sorted(int(i) for i in want)
        assert [v["index"] for v in got] == ids  # none for the text of <unk>s alone
        values = np.asarray([want[str(i)] for i in ids], dtype=np.float32)
        assert not ids or worst([v["value"] for v in got], values) <= TOLERANCE
    top = await post_ok(client, "/embed_sparse", {"inputs": TEXTS[1], "model": "m3", "top_k": 2})
    best = sorted(expected["lexical_weights"][1].items(), key=lambda kv: -float(kv[1]))[:2]
    assert [v["index"] for v in top[0]] == sorted(int(i) for i, _ in best)


async def test_every_rerank_route_scores_by_maxsim(client, expected, reference) -> None:
    query = expected["colbert_vecs"][len(TEXTS)]
    documents = expected["colbert_vecs"][len(TEXTS) + 1:]
    want = np.asarray([float(reference.colbert_score(query, d)) for d in documents], dtype=np.float32)
    tei = await post_ok(client, "/rerank", {"query": QUERY, "texts": DOCUMENTS, "model": "m3"})
    assert worst([r["score"] for r in sorted(tei, key=lambda r: r["index"])], want) <= TOLERANCE
    assert [r["index"] for r in tei] == [int(i) for i in np.argsort(-want, kind="stable")]
    cohere = await post_ok(client, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS, "model": "m3", "top_n": 2})
    assert [r["index"] for r in cohere["results"]] == [r["index"] for r in tei[:2]]
    assert worst([r["relevance_score"] for r in cohere["results"]], want[[r["index"] for r in tei[:2]]]) <= TOLERANCE
    score = await post_ok(client, "/score", {"text_1": QUERY, "text_2": DOCUMENTS, "model": "m3"})
    assert worst([d["score"] for d in score["data"]], want) <= TOLERANCE


async def test_explain_gives_each_query_tokens_best_match(client, expected) -> None:
    answer = await post_ok(client, "/rerank", {"query": QUERY, "texts": DOCUMENTS[:2], "model": "m3",
                                               "explain": True})
    query = np.asarray(expected["colbert_vecs"][len(TEXTS)], dtype=np.float32)
    for result in answer:
        document = np.asarray(expected["colbert_vecs"][len(TEXTS) + 1 + result["index"]], dtype=np.float32)
        similarities = query @ document.T  # (Q, K)
        matches = result["explanation"]
        assert len(matches) == len(query)  # every query token but <s>
        assert worst([m["similarity"] for m in matches], similarities.max(axis=1)) <= TOLERANCE
        assert abs(np.mean([m["similarity"] for m in matches]) - result["score"]) <= TOLERANCE  # bge-m3 averages
        text = DOCUMENTS[result["index"]]
        for match in matches:
            assert 0 <= match["start"] <= match["stop"] <= len(text)
            assert 0 <= match["query_start"] <= match["query_stop"] <= len(QUERY)
        assert any(QUERY[m["query_start"]:m["query_stop"]].strip() for m in matches)


async def test_the_size_cap_refuses_before_any_run(source: Path, tiny_plain_bundle: Path) -> None:
    async with serving([f"m3={source.parent / 'bundle'}"], intra_op_threads=1, embed_all_cap_bytes=2_000) as (_, c):
        refused = await c.post("/v1/multi-vector", json={"input": TEXTS})
        assert "bytes" in assert_error(refused, 422, "response_too_large")["message"]
        small = await post_ok(c, "/v1/multi-vector", {"input": "a", "dimensions": 4})
        assert len(small["data"][0]["embeddings"][0]) == 4


async def test_a_model_without_multi_vectors_is_refused(client) -> None:
    refused = await client.post("/v1/multi-vector", json={"input": "x", "model": "plain"})
    assert "cannot give multi-vector outputs" in assert_error(refused, 422, "unsupported")["message"]
    tasks = {m["name"]: m["tasks"] for m in (await client.get("/info")).json()["models"]}
    assert {"multi_vector", "sparse", "rerank"} <= set(tasks["m3"]) and "multi_vector" not in tasks["plain"]


async def test_v2_gives_all_three_outputs_from_one_run(client, expected, runs) -> None:
    m3 = next(fake for fake in runs.values() if fake.manifest.multi_vector is not None)
    before = len(m3.kinds)
    body = {"inputs": [{"name": "text", "shape": [len(TEXTS)], "datatype": "BYTES", "data": TEXTS}],
            "outputs": [{"name": n} for n in ("embeddings", "sparse", "multi_vectors", "multi_vector_mask")]}
    answer = await post_ok(client, "/v2/models/m3/infer", body)
    assert m3.kinds[before:] == [MULTI]  # one run of the fast graph's session, every output from it
    out = {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in answer["outputs"]}
    assert worst(out["embeddings"], np.asarray(expected["dense_vecs"][:len(TEXTS)], dtype=np.float32)) <= TOLERANCE
    for row, want in enumerate(_vectors(expected, 0, len(TEXTS))):
        kept = out["multi_vector_mask"][row].astype(bool)
        assert kept.sum() == len(want) and worst(out["multi_vectors"][row][kept], want) <= TOLERANCE
        assert not out["multi_vectors"][row][~kept].any()
        weights = expected["lexical_weights"][row]
        dense = np.zeros(out["sparse"].shape[1], dtype=np.float32)
        dense[[int(i) for i in weights]] = [float(w) for w in weights.values()]
        assert worst(out["sparse"][row], dense) <= TOLERANCE
    refused = await client.post("/v2/models/m3/infer", json={**body, "outputs": [{"name": "sparse"},
                                                                                 {"name": "attentions"}]})
    assert refused.status_code == 422 and "request of their own" in refused.json()["error"]  # the protocol's shape


async def test_maxsim_map_is_the_references_similarities(client, expected, reference) -> None:
    answer = await post_ok(client, "/maxsim", {"model": "m3", "query": QUERY, "document": DOCUMENTS[0]})
    query = np.asarray(expected["colbert_vecs"][len(TEXTS)], dtype=np.float32)
    document = np.asarray(expected["colbert_vecs"][len(TEXTS) + 1], dtype=np.float32)
    similarities = query @ document.T  # (Q, K)
    assert worst(answer["similarities"], similarities) <= TOLERANCE
    assert answer["best"] == similarities.argmax(axis=1).tolist()
    assert abs(answer["score"] - float(reference.colbert_score(query, document))) <= TOLERANCE
    assert answer["reduction"] == "mean"
    tokens = answer["query_tokens"]
    assert len(tokens) == len(query) and all(t["weight"] is not None and t["weight"] >= 0 for t in tokens)
    covered = {i for t in tokens for i in range(t["start"], t["stop"])}
    assert covered <= set(range(len(QUERY))) and {i for i, c in enumerate(QUERY) if c != " "} <= covered
    assert len(answer["document_tokens"]) == len(document)


async def test_a_long_document_gets_its_best_windows_maxsim(client, reference) -> None:
    """chunking max: each window of a long document scored as FlagEmbedding scores that window's text alone."""
    document = " ".join(TEXTS[:4] * 3)  # several windows of the 64-token tiny model
    answer = await post_ok(client, "/rerank", {"model": "m3", "query": QUERY, "texts": [document], "chunking": "max",
                                               "chunk_overlap": 8})
    window = answer[0]["window"]
    assert window["stop"] - window["start"] < len(document)  # a window, not the whole text
    query = bge_m3.encode_reference(reference, [QUERY], 64)["colbert_vecs"][0]
    assert abs(answer[0]["score"] - float(reference.colbert_score(query, _window_vectors(reference, document,
                                                                                          window)))) <= TOLERANCE
    truncated = await post_ok(client, "/rerank", {"model": "m3", "query": QUERY, "texts": [document]})
    assert answer[0]["score"] >= truncated[0]["score"] - TOLERANCE  # the first window is one of those scored


def _window_vectors(reference: Any, document: str, window: dict[str, int]) -> Any:
    """FlagEmbedding's colbert vectors of the window alone: the run of the reference tokenizer's tokens of the whole
    document that the window's span starts (its `tokens` of them), between <s> and </s>, through its model as its
    encode runs them."""
    import torch

    tokens = reference.tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    first = next(k for k, (a, _) in enumerate(tokens["offset_mapping"]) if a >= window["start"])
    ids = tokens["input_ids"][first:first + window["tokens"]]  # the window's run of content tokens
    assert tokens["offset_mapping"][first + window["tokens"] - 1][1] == window["stop"]
    ids = [reference.tokenizer.cls_token_id, *ids, reference.tokenizer.eos_token_id]
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    with torch.no_grad():
        out = reference.model(batch, return_dense=False, return_sparse=False, return_colbert_vecs=True)
    return out["colbert_vecs"][0, :len(ids) - 1].numpy()
