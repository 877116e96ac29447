"""An image classifier (ViTForImageClassification) on TEI's POST /classify (and /predict): images as /embed takes
them, per image its labels and scores best first, equal to transformers' image-classification pipeline (its Pillow
processor, the model) within 1e-5; top_k, raw scores and what is refused for images.
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

from tests.helpers.serving import assert_error, post_ok, serving
from tests.helpers.vision import reference_model, shared_bundle

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5


def picture(index: int) -> bytes:
    rng = np.random.default_rng(20 + index)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(26 + 8 * index, 35 + 3 * index, 3), dtype=np.uint8)).save(
        buffer, format="PNG")
    return buffer.getvalue()


IMAGES = [picture(0), picture(1)]


def data_uri(data: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, torch.nn.Module]:
    """(checkpoint, bundle, reference model): tests.helpers.vision.shared_bundle."""
    source, bundle = shared_bundle(tmp_path_factory, "vit-classifier-small")
    return source, bundle, reference_model("vit-classifier-small", source)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(classifier: tuple[Path, Path, Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with serving([f"vit={classifier[1]}"], intra_op_threads=1) as (_, served):
        yield served


async def test_labels_and_scores_are_the_pipelines(client: httpx.AsyncClient,
                                                   classifier: tuple[Path, Path, Any]) -> None:
    source, _, model = classifier
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pipe = transformers.pipeline("image-classification", model=model, image_processor=processor)
    got = await post_ok(client, "/classify", {"inputs": [data_uri(IMAGES[0]), {"image": data_uri(IMAGES[1])}]})
    for data, answer in zip(IMAGES, got, strict=True):
        expected = pipe(Image.open(io.BytesIO(data)), top_k=None)
        assert [a["label"] for a in answer] == [e["label"] for e in expected]
        assert max(abs(a["score"] - e["score"]) for a, e in zip(answer, expected, strict=True)) <= TOLERANCE
    best = await post_ok(client, "/classify", {"inputs": {"image": data_uri(IMAGES[0])}, "top_k": 1})
    assert [[a["label"] for a in one] for one in best] == [[got[0][0]["label"]]]
    raw = await post_ok(client, "/classify", {"inputs": [data_uri(IMAGES[0])], "raw_scores": True})
    with torch.no_grad():
        pixels = processor([Image.open(io.BytesIO(IMAGES[0]))], return_tensors="pt")["pixel_values"]
        logits = model(pixel_values=pixels).logits[0].numpy()
    by_label = {a["label"]: a["score"] for a in raw[0]}
    assert max(abs(by_label[model.config.id2label[i]] - v) for i, v in enumerate(logits)) <= TOLERANCE


async def test_predict_takes_image_items(client: httpx.AsyncClient) -> None:
    """TEI's /predict: one {"image": ...} item answers one list of labels, a list of them one list per image, the
    same as /classify's."""
    classified = await post_ok(client, "/classify", {"inputs": [data_uri(IMAGES[0]), data_uri(IMAGES[1])]})
    one = await post_ok(client, "/predict", {"inputs": {"image": data_uri(IMAGES[1])}})
    both = await post_ok(client, "/predict", {"inputs": [{"image": data_uri(i)} for i in IMAGES],
                                             "parameters": {"top_k": 2}})
    assert one == classified[1] and both == [labels[:2] for labels in classified]
    assert_error(await client.post("/predict", json={"inputs": {"image": data_uri(IMAGES[0])}, "truncate": True}),
                 422, "not_for_images")


async def test_what_classifying_images_refuses(client: httpx.AsyncClient) -> None:
    assert_error(await client.post("/classify", json={"inputs": [data_uri(IMAGES[0])], "truncate": True}), 422,
                 "not_for_images")
    assert_error(await client.post("/classify", json={"inputs": [data_uri(IMAGES[0]), "a text"]}), 422,
                 "invalid_image")
    assert_error(await client.post("/classify", json={"inputs": "a text"}), 422, "invalid_image")
    await post_ok(client, "/classify", {"inputs": [data_uri(IMAGES[1])]})  # still serving
