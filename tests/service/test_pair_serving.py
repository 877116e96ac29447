"""CLIP and SigLIP pairs served each as one model (its bundle holds both towers: export.pairs): texts, images and both
mixed on /v1/embeddings and /embed, image-text /similarity and /zero-shot-image-classification, each equal to
transformers (the model's get_text_features and get_image_features on its tokenizer's ids, as its processor pads them,
and its Pillow processor's pixels; the zero-shot-image-classification pipeline) to 1e-5; /info lists both modalities
and the pair's scoring; what a text-only model cannot do is refused by name, and the server keeps serving. SigLIP's
text tower has 64 positions, the length the pipeline pads SigLIP's texts to.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
import torch
import transformers
from PIL import Image

from export.bundle import export_bundle
from tests.helpers.serving import assert_error, post_ok, serving
from tests.helpers.vision import reference_model, save_siglip, shared_bundle

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
TEXTS = ["a photo of a cat", "a red square with stripes", "the sky"]
LABELS = ["cat", "dog", "blue bird", "red square"]


def picture(index: int) -> bytes:
    rng = np.random.default_rng(10 + index)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(28 + 9 * index, 36 + 5 * index, 3), dtype=np.uint8)).save(
        buffer, format="PNG" if index % 2 == 0 else "JPEG")
    return buffer.getvalue()


IMAGES = [picture(0), picture(1)]


def data_uri(data: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


PAIRS = ("clip", "siglip")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, torch.nn.Module]]:
    """Each pair's (checkpoint, bundle, reference model)."""
    source, bundle = shared_bundle(tmp_path_factory, "clip")  # the run's shared CLIP (tests.helpers.vision)
    out = {"clip": (source, bundle, reference_model("clip", source))}
    root = tmp_path_factory.mktemp("siglip")
    model = save_siglip(root / "source", max_position_embeddings=64)
    export_bundle(root / "source", root / "bundle", variants=["fp32"])
    out["siglip"] = (root / "source", root / "bundle", model)
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(pairs: dict[str, tuple[Path, Path, Any]], tiny_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    bundles = [f"{pair}={bundle}" for pair, (_, bundle, _) in pairs.items()] + [f"text={tiny_bundle}"]
    async with serving(bundles, intra_op_threads=1, cache_bytes=0) as (_, served):
        yield served


def tokenizer(pair: str, source: Path) -> Any:
    if pair == "siglip":
        return transformers.SiglipTokenizer.from_pretrained(source)
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(source / "tokenizer.json"), pad_token="<pad>")


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def features(rows: Any) -> np.ndarray:
    return getattr(rows, "pooler_output", rows).numpy()  # transformers 5: an output object; 4: the tensor


def references(pair: str, pairs: dict[str, Any], texts: list[str], images: list[bytes]) -> tuple[
        np.ndarray, np.ndarray]:
    """transformers' text and image embeddings (the features, not normalised, as the bundle's `normalize` false
    serves them on /v1/embeddings): its tokenizer as its processor calls it (SigLIP: padded to max_length, no mask),
    its Pillow processor."""
    source, _, model = pairs[pair]
    length = model.config.text_config.max_position_embeddings  # the served max length: texts are cut there
    padding = {"padding": "max_length" if pair == "siglip" else True, "max_length": length}
    batch = tokenizer(pair, source)(texts, truncation=True, return_tensors="pt", **padding)
    if pair == "siglip":
        batch = {"input_ids": batch["input_ids"]}
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pixels = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return features(model.get_text_features(**batch)), features(model.get_image_features(pixel_values=pixels))


@pytest.mark.parametrize("pair", PAIRS)
async def test_texts_images_and_both_embed_into_the_one_space(client: httpx.AsyncClient, pairs: Any, pair: str) -> None:
    texts, images = references(pair, pairs, TEXTS, IMAGES)
    answer = await post_ok(client, "/v1/embeddings", {"model": pair, "input": TEXTS})
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - texts).max() <= TOLERANCE
    answer = await post_ok(client, "/v1/embeddings", {"model": pair, "input": [data_uri(i) for i in IMAGES]})
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - images).max() <= TOLERANCE
    mixed = [TEXTS[0], {"image": data_uri(IMAGES[1])}, TEXTS[2], data_uri(IMAGES[0])]
    answer = await post_ok(client, "/v1/embeddings", {"model": pair, "input": mixed})
    got = np.array([d["embedding"] for d in answer["data"]])
    assert np.abs(got - np.stack([texts[0], images[1], texts[2], images[0]])).max() <= TOLERANCE
    vectors = await post_ok(client, "/embed", {"model": pair, "inputs": [{"image": base64.b64encode(
        IMAGES[0]).decode()}, TEXTS[1]]})
    assert np.abs(np.array(vectors) - unit(np.stack([images[0], texts[1]]))).max() <= TOLERANCE  # TEI's normalize


@pytest.mark.parametrize("pair", PAIRS)
async def test_similarity_of_an_image_with_texts(client: httpx.AsyncClient, pairs: Any, pair: str) -> None:
    texts, images = references(pair, pairs, TEXTS, IMAGES[:1])
    scores = await post_ok(client, "/similarity", {"model": pair, "inputs": {
        "source_sentence": data_uri(IMAGES[0]), "sentences": TEXTS}})
    assert np.abs(np.array(scores) - unit(texts) @ unit(images)[0]).max() <= TOLERANCE


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("template", [None, "a picture of a {}"])
async def test_zero_shot_is_the_pipelines(client: httpx.AsyncClient, pairs: Any, pair: str,
                                          template: str | None) -> None:
    """transformers' zero-shot-image-classification pipeline over the same model, tokenizer and processor: CLIP's
    scores a softmax over the labels, SigLIP's a sigmoid each."""
    source, _, model = pairs[pair]
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pipe = transformers.pipeline("zero-shot-image-classification", model=model, tokenizer=tokenizer(pair, source),
                                 image_processor=processor)
    extra = {} if template is None else {"hypothesis_template": template}
    expected = pipe(Image.open(io.BytesIO(IMAGES[1])), candidate_labels=LABELS, **extra)
    got = await post_ok(client, "/zero-shot-image-classification", {
        "model": pair, "image": data_uri(IMAGES[1]), "candidate_labels": LABELS, **extra})
    assert [g["label"] for g in got] == [e["label"] for e in expected]
    assert max(abs(g["score"] - e["score"]) for g, e in zip(got, expected, strict=True)) <= TOLERANCE
    total = sum(g["score"] for g in got)
    assert total == pytest.approx(1.0) if pair == "clip" else abs(total - 1.0) > 1e-3  # softmax, or sigmoids


async def test_info_and_what_is_refused(client: httpx.AsyncClient) -> None:
    info = (await client.get("/info")).json()
    listed = {m["name"]: m for m in info["models"]}
    assert listed["clip"]["modalities"] == ["text", "image"] and listed["text"]["modalities"] == ["text"]
    assert listed["clip"]["pair"]["scoring"] == "softmax" and listed["clip"]["image"]["tokens"] == 17
    assert listed["siglip"]["pair"]["scoring"] == "sigmoid" and listed["siglip"]["image"]["tokens"] == 16  # no CLS
    assert "zero_shot" in listed["clip"]["tasks"] and "zero_shot" not in listed["text"]["tasks"]
    body = {"image": data_uri(IMAGES[0]), "candidate_labels": LABELS}
    assert_error(await client.post("/zero-shot-image-classification", json={**body, "model": "text"}), 422,
                 "unsupported")
    assert_error(await client.post("/zero-shot-image-classification", json={
        **body, "model": "clip", "hypothesis_template": "no slot"}), 422, "invalid_request")
    assert_error(await client.post("/zero-shot-image-classification", json={
        **body, "model": "clip", "image": "https://example.com/cat.png"}), 422, "image_url_refused")
    assert_error(await client.post("/v1/embeddings", json={
        "model": "siglip", "input": [TEXTS[0], data_uri(IMAGES[0])], "prompt_name": "query"}), 422, "not_for_images")
    await post_ok(client, "/v1/embeddings", {"model": "siglip", "input": TEXTS[0]})  # still serving


async def test_cohere_inputs_and_infinity_modality(client: httpx.AsyncClient, pairs: Any) -> None:
    """Cohere's `inputs` of one part each (texts and image_url parts in one request, in order) and Infinity's
    `modality` (image: bare base64 read as images; text: a data URI read as a text) on a pair, against transformers."""
    uri = data_uri(IMAGES[0])
    texts, images = references("clip", pairs, [TEXTS[1], uri], IMAGES)
    inputs = [{"content": [{"type": "image_url", "image_url": {"url": uri}}]},
              {"content": [{"type": "text", "text": TEXTS[1]}]}]
    answer = await post_ok(client, "/v2/embed", {"model": "clip", "inputs": inputs})
    assert np.abs(np.array(answer["embeddings"]["float"]) - np.stack([images[0], texts[0]])).max() <= TOLERANCE
    assert_error(await client.post("/v2/embed", json={"model": "clip", "inputs": inputs, "input_type": "search_query"}),
                 422, "not_for_images")
    bare = [base64.b64encode(data).decode() for data in IMAGES]
    answer = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": bare, "modality": "image"})
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - images).max() <= TOLERANCE
    answer = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": [uri], "modality": "text"})
    assert np.abs(np.array(answer["data"][0]["embedding"]) - texts[1]).max() <= TOLERANCE
    assert_error(await client.post("/v1/embeddings", json={"model": "clip", "input": [{"image": uri}],
                                                           "modality": "text"}), 422, "invalid_image")
