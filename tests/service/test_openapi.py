"""The OpenAPI document a server publishes says what its served models accept (service/openapi.py): bounds
from their manifests and tokenizers, inputs per request from the settings, and no route that none of them
can answer (such a route answers 404)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.serving import assert_error, serving


def prop(doc: dict[str, Any], schema: str, name: str) -> dict[str, Any]:
    return doc["components"]["schemas"][schema]["properties"][name]


def maxima(node: Any) -> set[int]:
    """Every `maximum` under `node`."""
    if isinstance(node, dict):
        return ({node["maximum"]} if "maximum" in node else set()).union(*(maxima(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(maxima(v) for v in node))
    return set()


async def test_the_bounds_are_the_served_models(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, max_inputs=8) as (app, client):
        doc = (await client.get("/openapi.json")).json()
        vocabulary = app.state.models.default.bundle.tokenizer.vocab_size
    assert maxima(prop(doc, "EmbedRequest", "dimensions")) == {32}  # hidden size
    assert maxima(prop(doc, "OpenAIEmbeddingRequest", "dimensions")) == {32}
    assert maxima(prop(doc, "AttentionRequest", "layers")) == {1}  # 2 layers
    assert maxima(prop(doc, "AttentionRequest", "heads")) == {1}  # 2 heads
    assert maxima(prop(doc, "DecodeRequest", "ids")) == {vocabulary - 1}
    assert maxima(prop(doc, "OpenAIEmbeddingRequest", "input")) == {vocabulary - 1}
    assert maxima(prop(doc, "ClassifyRequest", "chunk_overlap")) == {61}  # 64 tokens less [CLS], [SEP], then 1
    assert prop(doc, "ClassifyRequest", "chunk_overlap")["default"] == 32  # fits in the window
    lists = [b for b in prop(doc, "EmbedRequest", "inputs")["anyOf"] if b.get("type") == "array"]
    assert [b["maxItems"] for b in lists] == [8]
    assert {"/classify", "/predict", "/attention", "/embed_all"} <= set(doc["paths"])


async def test_an_embedding_only_model_has_no_classification_routes(tiny_plain_bundle: Path) -> None:
    async with serving(tiny_plain_bundle) as (_, client):
        doc = (await client.get("/openapi.json")).json()
        assert {"/classify", "/predict"}.isdisjoint(doc["paths"]) and "/embed" in doc["paths"]
        for path, body in (("/classify", {"inputs": "a"}), ("/predict", {"inputs": "a"})):
            error = assert_error(await client.post(path, json=body), 404, "not_found")
            assert "no served model can classify" in error["message"]
        infer = doc["paths"]["/v2/models/{name}/infer"]["post"]["requestBody"]["content"]["application/json"]
        names = infer["schema"]["properties"]["outputs"]["anyOf"][0]["items"]["properties"]["name"]
        assert names["enum"] == ["embeddings", "attentions", "attention_mask"]


async def test_with_two_models_the_bounds_are_the_tightest_and_routes_any_can_answer(
    tiny_bundle: Path, tiny_plain_bundle: Path,
) -> None:
    async with serving([tiny_plain_bundle, f"tiny={tiny_bundle}"]) as (_, client):
        doc = (await client.get("/openapi.json")).json()
        assert "/classify" in doc["paths"]  # the second model classifies
        error = assert_error(await client.post("/classify", json={"inputs": "a"}), 422, "unsupported")  # the first
        assert "no classification head" in error["message"]
        assert (await client.post("/classify", json={"inputs": "a", "model": "tiny"})).status_code == 200
