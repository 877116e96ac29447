"""A multi-vector model served: a random bge-m3 (tests.helpers.bge_m3) beside a plain bundle, over HTTP. Jina's
/v1/multi-vector gives BGEM3FlagModel's colbert_vecs (float and base64, cut to `dimensions`), /embed_sparse its
lexical weights, the rerank routes and /score its colbert_score (MaxSim, averaged over the query's tokens as
bge-m3 does), `explain` each query token's best document token; the answer-size cap refuses before any run; a
model without multi-vector outputs is refused with what it can do.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from export.bundle import export_bundle
from tests.helpers import bge_m3
from tests.helpers.serving import assert_error, post_ok, serving, worst

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
TEXTS = [*bge_m3.TEXTS[:4], bge_m3.UNKNOWN, bge_m3.TEXTS[-1]]  # 1 to ~40 tokens, one with <unk>s
QUERY = bge_m3.QUERY
DOCUMENTS = [bge_m3.DOCUMENT, *bge_m3.TEXTS[:3], bge_m3.UNKNOWN]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bge-m3-served") / "source"
    bge_m3.save_bge_m3(directory, "tiny")
    return directory


@pytest.fixture(scope="module")
def reference(source: Path) -> Any:
    return bge_m3.reference_model(source)


@pytest.fixture(scope="module")
def expected(reference: Any) -> dict[str, Any]:
    return bge_m3.encode_reference(reference, [*TEXTS, QUERY, *DOCUMENTS], 64)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(source: Path, tiny_plain_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    """bge-m3 first (fp32, with its attention graph), a plain bundle second."""
    bundle = source.parent / "bundle"
    export_bundle(source, bundle, variants=["fp32"])
    async with serving([f"m3={bundle}", f"plain={tiny_plain_bundle}"], intra_op_threads=1) as (_, served):
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
