"""A CLIP pair served as one model (its bundle holds both towers: export.pairs): texts, images and both mixed on
/v1/embeddings and /embed, image-text /similarity and /zero-shot-image-classification, each equal to transformers
(CLIPModel's get_text_features and get_image_features on its tokenizer's ids and its Pillow processor's pixels, and
the zero-shot-image-classification pipeline) to 1e-5; /info lists both modalities and the pair's scoring; what a
text-only model cannot do is refused by name, and the server keeps serving.
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
from tests.helpers.vision import save_clip

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


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, torch.nn.Module]:
    root = tmp_path_factory.mktemp("clip")
    model = save_clip(root / "source")
    export_bundle(root / "source", root / "bundle", variants=["fp32"])
    return root / "source", root / "bundle", model


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(clip: tuple[Path, Path, Any], tiny_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serving([f"clip={clip[1]}", f"text={tiny_bundle}"], intra_op_threads=1, cache_bytes=0) as (_, served):
        yield served


def tokenizer(source: Path) -> Any:
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(source / "tokenizer.json"), pad_token="<pad>")


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def features(rows: Any) -> np.ndarray:
    return getattr(rows, "pooler_output", rows).numpy()  # transformers 5: an output object; 4: the tensor


def references(clip: tuple[Path, Path, Any], texts: list[str], images: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' text and image embeddings (CLIPModel's features, not normalised, as the bundle's `normalize`
    false serves them on /v1/embeddings): its tokenizer, its Pillow processor."""
    source, _, model = clip
    batch = tokenizer(source)(texts, padding=True, return_tensors="pt")
    processor = transformers.CLIPImageProcessor.from_pretrained(source)
    pixels = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return features(model.get_text_features(**batch)), features(model.get_image_features(pixel_values=pixels))


async def test_texts_images_and_both_embed_into_the_one_space(client: httpx.AsyncClient, clip: Any) -> None:
    texts, images = references(clip, TEXTS, IMAGES)
    answer = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": TEXTS})
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - texts).max() <= TOLERANCE
    answer = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": [data_uri(i) for i in IMAGES]})
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - images).max() <= TOLERANCE
    mixed = [TEXTS[0], {"image": data_uri(IMAGES[1])}, TEXTS[2], data_uri(IMAGES[0])]
    answer = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": mixed})
    got = np.array([d["embedding"] for d in answer["data"]])
    assert np.abs(got - np.stack([texts[0], images[1], texts[2], images[0]])).max() <= TOLERANCE
    vectors = await post_ok(client, "/embed", {"model": "clip", "inputs": [{"image": base64.b64encode(
        IMAGES[0]).decode()}, TEXTS[1]]})
    assert np.abs(np.array(vectors) - unit(np.stack([images[0], texts[1]]))).max() <= TOLERANCE  # TEI's normalize


async def test_similarity_of_an_image_with_texts(client: httpx.AsyncClient, clip: Any) -> None:
    texts, images = references(clip, TEXTS, IMAGES[:1])
    scores = await post_ok(client, "/similarity", {"model": "clip", "inputs": {
        "source_sentence": data_uri(IMAGES[0]), "sentences": TEXTS}})
    assert np.abs(np.array(scores) - unit(texts) @ unit(images)[0]).max() <= TOLERANCE


@pytest.mark.parametrize("template", [None, "a picture of a {}"])
async def test_zero_shot_is_the_pipelines(client: httpx.AsyncClient, clip: Any, template: str | None) -> None:
    """transformers' zero-shot-image-classification pipeline over the same model, tokenizer and processor."""
    source, _, model = clip
    pipe = transformers.pipeline("zero-shot-image-classification", model=model, tokenizer=tokenizer(source),
                                 image_processor=transformers.CLIPImageProcessor.from_pretrained(source))
    extra = {} if template is None else {"hypothesis_template": template}
    expected = pipe(Image.open(io.BytesIO(IMAGES[1])), candidate_labels=LABELS, **extra)
    got = await post_ok(client, "/zero-shot-image-classification", {
        "model": "clip", "image": data_uri(IMAGES[1]), "candidate_labels": LABELS, **extra})
    assert [g["label"] for g in got] == [e["label"] for e in expected]
    assert max(abs(g["score"] - e["score"]) for g, e in zip(got, expected, strict=True)) <= TOLERANCE
    assert sum(g["score"] for g in got) == pytest.approx(1.0)  # CLIP: a softmax over the labels


async def test_info_and_what_is_refused(client: httpx.AsyncClient) -> None:
    info = (await client.get("/info")).json()
    listed = {m["name"]: m for m in info["models"]}
    assert listed["clip"]["modalities"] == ["text", "image"] and listed["text"]["modalities"] == ["text"]
    assert listed["clip"]["pair"]["scoring"] == "softmax" and listed["clip"]["image"]["tokens"] == 17
    assert "zero_shot" in listed["clip"]["tasks"] and "zero_shot" not in listed["text"]["tasks"]
    body = {"image": data_uri(IMAGES[0]), "candidate_labels": LABELS}
    assert_error(await client.post("/zero-shot-image-classification", json={**body, "model": "text"}), 422,
                 "unsupported")
    assert_error(await client.post("/zero-shot-image-classification", json={
        **body, "model": "clip", "hypothesis_template": "no slot"}), 422, "invalid_request")
    assert_error(await client.post("/zero-shot-image-classification", json={
        **body, "model": "clip", "image": "https://example.com/cat.png"}), 422, "image_url_refused")
    assert_error(await client.post("/v1/embeddings", json={
        "model": "clip", "input": [TEXTS[0], data_uri(IMAGES[0])], "prompt_name": "query"}), 422, "not_for_images")
    await post_ok(client, "/v1/embeddings", {"model": "clip", "input": TEXTS[0]})  # still serving
