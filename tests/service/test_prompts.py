"""Prompts served: a sentence-transformers model (MPNet, weighted-mean pooling, a tanh Dense, Normalize; prompts query
"query: " and document "passage: ", default query; tests/helpers/exports.py "mpnet-sentence") exported and served,
and sentence-transformers' own `encode(texts, prompt_name=...)` of that directory as the reference: a request's
`prompt_name` (/embed, /embed_all, /similarity, /v2, /v1/embeddings) or `input_type` (/v1/embeddings) gets the
model's prefixed embedding (both at once are refused: each chooses the prompt), no name gets the default prompt's,
an unknown name is a 422 listing the prompts, `usage` counts the prompt's tokens, and /info, /v1/models and the
OpenAPI document name the prompts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from tests.helpers.exports import Exported
from tests.helpers.sentence import PROMPTS, load_reference
from tests.helpers.serving import assert_error, post_ok, serving, worst
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
CASE = "mpnet-sentence"
TEXTS = MULTILINGUAL[:6]
SHORT = "Café crème à Zürich"  # one window of the model's 20 tokens, prompt included


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(family_export: Callable[[str], Exported]) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(family_export(CASE).bundle, intra_op_threads=1) as (_, served):
        yield served


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def reference(family_export: Callable[[str], Exported]) -> dict[str | None, np.ndarray]:
    """sentence-transformers' encode() of TEXTS by prompt name (None: no prompt_name, so its default)."""
    model: Any = load_reference(family_export(CASE).source)
    encoded = {name: model.encode(TEXTS, prompt_name=name) for name in (None, "query", "document")}
    return {**encoded, "short": model.encode([SHORT], prompt_name="document")}




async def test_prompt_name_and_input_type_give_sentence_transformers_embeddings(client, reference) -> None:
    assert not np.allclose(reference["query"], reference["document"], atol=1e-3)  # the prompts matter
    assert worst(reference[None], reference["query"]) == 0.0  # ST's default prompt is query
    for name in ("query", "document"):
        embedded = await post_ok(client, "/embed", {"inputs": TEXTS, "prompt_name": name})
        assert worst(embedded, reference[name]) <= TOLERANCE
        data = (await post_ok(client, "/v1/embeddings", {"input": TEXTS, "input_type": name}))["data"]
        assert worst([d["embedding"] for d in data], reference[name]) <= TOLERANCE
    assert worst(await post_ok(client, "/embed", {"inputs": TEXTS}), reference[None]) <= TOLERANCE
    data = (await post_ok(client, "/v1/embeddings", {"input": TEXTS}))["data"]
    assert worst([d["embedding"] for d in data], reference[None]) <= TOLERANCE
    chunked = await post_ok(client, "/embed", {"inputs": [SHORT], "prompt_name": "document", "chunking": "mean",
                                            "chunk_overlap": 2})
    assert worst(chunked, reference["short"]) <= TOLERANCE  # one window: its prompted encoding


async def test_v1_embeddings_honours_prompt_name_and_refuses_it_beside_input_type(client, reference) -> None:
    for name in ("query", "document"):
        data = (await post_ok(client, "/v1/embeddings", {"input": TEXTS, "prompt_name": name}))["data"]
        assert worst([d["embedding"] for d in data], reference[name]) <= TOLERANCE
    refused = await client.post("/v1/embeddings", json={"input": "x", "prompt_name": "passage"})
    assert "'passage' is not one of this model's prompts" in assert_error(refused, 422, "unknown_prompt")["message"]
    both = {"input": "x", "prompt_name": "document", "input_type": "query"}
    error = assert_error(await client.post("/v1/embeddings", json=both), 422, "prompt_conflict")
    assert "prompt_name and input_type" in error["message"]


async def test_usage_counts_the_prompt_as_the_model_reads_it(client) -> None:
    texts = ["a b", "c"]
    plain = await post_ok(client, "/tokenize", {"inputs": texts})
    prompted = await post_ok(client, "/tokenize", {"inputs": [PROMPTS["document"] + t for t in texts]})
    usage = (await post_ok(client, "/v1/embeddings", {"input": texts, "input_type": "document"}))["usage"]
    assert usage["prompt_tokens"] == sum(len(t) for t in prompted) > sum(len(t) for t in plain)
    per_token = await post_ok(client, "/embed_all", {"inputs": texts, "prompt_name": "document"})
    assert [len(vectors) for vectors in per_token] == [len(t) for t in prompted]


async def test_similarity_and_v2_take_the_prompt_too(client, reference) -> None:
    unit = reference["document"]
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]},
            "parameters": {"prompt_name": "document"}}
    assert worst(await post_ok(client, "/similarity", body), unit[1:] @ unit[0]) <= TOLERANCE
    infer = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
             "parameters": {"prompt_name": "document"}, "outputs": [{"name": "embeddings"}]}
    (embeddings,) = (await post_ok(client, f"/v2/models/{CASE}/infer", infer))["outputs"]
    assert worst(np.reshape(embeddings["data"], embeddings["shape"]), unit) <= TOLERANCE


async def test_an_unknown_prompt_is_refused_naming_the_models_prompts(client) -> None:
    for path, body in (("/embed", {"inputs": "x", "prompt_name": "passage"}),
                       ("/embed_all", {"inputs": "x", "prompt_name": "passage"}),
                       ("/similarity", {"inputs": {"source_sentence": "x", "sentences": ["y"]},
                                        "parameters": {"prompt_name": "passage"}})):
        error = assert_error(await client.post(path, json=body), 422, "unknown_prompt")
        assert "'passage' is not one of this model's prompts (it has: 'document', 'query')" in error["message"]


async def test_info_models_and_the_document_name_the_prompts(client) -> None:
    info = (await client.get("/info")).json()
    assert (info["prompts"], info["default_prompt_name"]) == (PROMPTS, "query")
    (listed,) = (await client.get("/v1/models")).json()["data"]
    assert (listed["prompts"], listed["default_prompt_name"]) == (PROMPTS, "query")
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    for name in ("EmbedRequest", "OpenAIEmbeddingRequest", "EmbedAllRequest", "SimilarityParameters"):
        names = schemas[name]["properties"]["prompt_name"]["anyOf"][0]
        assert names["type"] == "string" and sorted(names["enum"]) == ["document", "query"]
    assert schemas["OpenAIEmbeddingRequest"]["not"]["required"] == ["prompt_name", "input_type"]  # one or the other
    most = schemas["EmbedRequest"]["properties"]["chunk_overlap"]["maximum"]  # the window less the longest prompt
    assert most < 20 - 2 - 1
    body = {"inputs": [" ".join(TEXTS)], "chunking": "mean", "prompt_name": "query"}
    assert (await client.post("/embed", json={**body, "chunk_overlap": most})).status_code == 200
    error = assert_error(await client.post("/embed", json={**body, "chunk_overlap": most + 1}), 422, "out_of_range")
    assert "tokens kept for its prompt" in error["message"]


async def test_a_chunked_request_naming_no_overlap_gets_half_of_this_small_window(client) -> None:
    """32 tokens do not fit this model's window (20 less 2 special tokens, less the longest prompt): a request
    that names no overlap gets half the window, as the served document's default says, and is never refused."""
    field = (await client.get("/openapi.json")).json()["components"]["schemas"]["EmbedRequest"]["properties"][
        "chunk_overlap"]
    assert field["maximum"] < 32 and field["default"] == (field["maximum"] + 1) // 2
    for path, key in (("/embed", "inputs"), ("/v1/embeddings", "input"), ("/", "inputs")):
        body = {key: " ".join(TEXTS), "chunking": "windows"}
        given = {**body, "chunk_overlap": field["default"]}
        assert await post_ok(client, path, body) == await post_ok(client, path, given)


async def test_with_a_model_of_another_default_overlap_the_document_states_none(
    family_export: Callable[[str], Exported], tiny_bundle: Path,
) -> None:
    async with serving([family_export(CASE).bundle, f"tiny={tiny_bundle}"], intra_op_threads=1) as (_, two):
        field = (await two.get("/openapi.json")).json()["components"]["schemas"]["EmbedRequest"]["properties"][
            "chunk_overlap"]
    assert field["maximum"] < 32 and "default" not in field  # this model takes half its window, tiny 32


async def test_the_prompt_is_in_the_cache_key(client) -> None:
    """The answer cache keys on token ids, the prompt's included: another prompt misses, the same prompt (named, or
    the default one) hits and returns the same vector."""
    text = "a text asked for with two prompts"

    async def embed(**body: Any) -> tuple[Any, str]:
        response = await client.post("/embed", json={"inputs": text, **body})
        assert response.status_code == 200, response.text
        return response.json(), response.headers["x-cached-inputs"]

    query, cached = await embed(prompt_name="query")
    document, document_cached = await embed(prompt_name="document")
    again, again_cached = await embed(prompt_name="query")
    default, default_cached = await embed()  # the default prompt is query: the same token ids
    assert (cached, document_cached, again_cached, default_cached) == ("0", "0", "1", "1")
    assert not np.allclose(query, document, atol=1e-3) and again == default == query
