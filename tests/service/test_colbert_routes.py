"""ColBERT models served (tests.helpers.colbert: a PyLate folder and a colbert-ai checkpoint at the tiny shape,
exported fp32), over HTTP: /v1/multi-vector's query vectors (markers, [MASK] expansion fed but not attended) and
document vectors (the skip-list dropped) equal their references', every rerank route and /score give the
references' MaxSim (summed over the query's tokens), explain names each query token's best document token, and
what a ColBERT model cannot do (token-id inputs, chunked documents) is refused with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from tests.helpers import colbert as ref
from tests.helpers.serving import assert_error, post_ok, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
LAYOUTS = ("pylate", "colbert_ai")


@pytest.fixture(scope="module")
def case(colbert_tiny: dict[str, Any]) -> dict[str, Any]:
    return colbert_tiny  # exported once per session (tests/fixtures.py)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(case: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    bundles = [f"{layout}={case[f'{layout}_bundle']}" for layout in LAYOUTS]
    async with serving(bundles, intra_op_threads=1) as (_, served):
        yield served


async def _vectors(client: httpx.AsyncClient, model: str, texts: list[str], input_type: str) -> list[np.ndarray]:
    answer = await post_ok(client, "/v1/multi-vector", {"model": model, "input": texts, "input_type": input_type})
    return [np.asarray(item["embeddings"], dtype=np.float32) for item in answer["data"]]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_queries_and_documents_equal_the_reference(client, case, layout) -> None:
    want = case[layout]
    ref.assert_equal_vectors(await _vectors(client, layout, ref.QUERIES, "query"), want["queries"], TOLERANCE)
    ref.assert_equal_vectors(await _vectors(client, layout, ref.DOCUMENTS, "document"), want["documents"], TOLERANCE)
    shape = ref.SHAPES["tiny"]
    answer = await post_ok(client, "/v1/multi-vector",
                           {"model": layout, "input": ref.QUERIES[1], "input_type": "query"})
    assert answer["usage"]["total_tokens"] == shape["query_length"]  # expanded to the query length


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_rerank_and_score_are_the_references_maxsim(client, case, layout) -> None:
    want = case[layout]["scores"]  # (queries, documents)
    for row, query in enumerate(ref.QUERIES[:2]):
        ranked = await post_ok(client, "/rerank", {"model": layout, "query": query, "texts": ref.DOCUMENTS})
        got = np.asarray([r["score"] for r in sorted(ranked, key=lambda r: r["index"])], dtype=np.float32)
        np.testing.assert_allclose(got, want[row], rtol=0, atol=TOLERANCE * max(1.0, float(np.abs(want[row]).max())))
    pairs = await post_ok(client, "/score", {"model": layout, "text_1": ref.QUERIES[:2], "text_2": ref.DOCUMENTS[:2]})
    diagonal = np.asarray([want[0, 0], want[1, 1]], dtype=np.float32)
    np.testing.assert_allclose([d["score"] for d in pairs["data"]], diagonal, rtol=0, atol=TOLERANCE * 16)


async def test_explain_sums_to_the_score(client) -> None:
    answer = await post_ok(client, "/v1/rerank", {"model": "pylate", "query": ref.QUERIES[0],
                                                  "documents": ref.DOCUMENTS[:2], "explain": True})
    for result in answer["results"]:
        matches = result["explanation"]
        assert len(matches) == ref.SHAPES["tiny"]["query_length"]  # every query position, expansion included
        assert abs(sum(m["similarity"] for m in matches) - result["relevance_score"]) <= TOLERANCE * 16
        document = ref.DOCUMENTS[result["index"]]
        spans = [document[m["start"]:m["stop"]] for m in matches]
        assert any(span.strip() for span in spans)
        assert all(m["query_stop"] <= len(ref.QUERIES[0]) for m in matches)


async def test_what_a_colbert_model_cannot_do_is_refused(client) -> None:
    ids = await client.post("/v1/multi-vector", json={"model": "pylate", "input": [[2, 5, 3]]})
    assert ids.status_code == 422
    chunked = await client.post("/rerank", json={"model": "pylate", "query": "q", "texts": ["d"], "chunking": "max"})
    assert "send the documents truncated" in assert_error(chunked, 422, "unsupported")["message"]


async def test_maxsim_map_shows_the_markers_and_expansion(client, case) -> None:
    answer = await post_ok(client, "/maxsim", {"model": "pylate", "query": ref.QUERIES[1],
                                               "document": ref.DOCUMENTS[1]})
    tokens = [t["token"] for t in answer["query_tokens"]]
    assert tokens[0] == "[CLS]" and tokens[1].strip().upper() == "[Q]"  # PyLate's marker, as its vocabulary holds it
    assert tokens[-1] == "[MASK]" and len(tokens) == ref.SHAPES["tiny"]["query_length"]
    assert all(t["weight"] is None for t in answer["query_tokens"])  # no token weights
    assert abs(answer["score"] - case["pylate"]["scores"][1, 1]) <= TOLERANCE * 16
    similarities = np.asarray(answer["similarities"])
    assert abs(similarities.max(axis=1).sum() - answer["score"]) <= TOLERANCE * 16
