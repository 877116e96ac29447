"""POST /attention for images: two image bundles (a random-weight ViT at 32 x 32 pixels, a 4 x 4 grid; a DINOv2 with
four registers served at a non-square 24 x 40, a 3 x 5 grid) beside a text bundle, sent PNG and JPEG bytes as data URIs
and {"image": ...} items. Every map, cell by cell, equals transformers' (its Pillow processor with use_fast=False, the
model with output_attentions=True and eager attention) within 1e-5, for all layers and heads and for a selection;
rollout equals a numpy reference computed from transformers' maps by the formula inference.postprocess.rollout
documents; the answer names each token and places the patches on the grid; and what is not for this model (a text to
an image model, an image to a text model, texts' fields with images) is refused by name before any graph runs.
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
from fastapi import FastAPI
from PIL import Image
from transformers.image_utils import load_image

from tests.helpers.serving import assert_error, graph_runs, post_ok, serving, worst
from tests.helpers.vision import reference_model, shared_bundle

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
CASES = {"vit-small": (4, 4, 1), "dinov2-registers-small": (3, 5, 5)}  # case: grid rows, cols, tokens before patches


def picture(index: int, fmt: str) -> bytes:
    """Seeded noise of a size of its own, as `fmt` bytes."""
    rng = np.random.default_rng(10 + index)
    pixels = rng.integers(0, 256, size=(28 + 9 * index, 41 + 6 * index, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = [picture(0, "PNG"), picture(1, "JPEG")]


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


ITEMS: list[Any] = [data_uri(IMAGES[0]), {"image": base64.b64encode(IMAGES[1]).decode()}]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, torch.nn.Module]]:
    """Each case (tests.helpers.vision.shared_bundle)'s (source, bundle, reference model: eval, eager attention)."""
    out = {}
    for case in CASES:
        source, bundle = shared_bundle(tmp_path_factory, case)
        out[case] = (source, bundle, reference_model(case, source))
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(exported: dict[str, tuple[Path, Path, Any]],
                 tiny_bundle: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    bundles = [f"{case}={bundle}" for case, (_, bundle, _) in exported.items()] + [f"text={tiny_bundle}"]
    async with serving(bundles, intra_op_threads=1, cache_bytes=0) as both:
        yield both


@pytest.fixture
def client(served: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return served[1]


def reference_maps(model: torch.nn.Module, source: Path, images: list[bytes]) -> np.ndarray:
    """transformers' (N, L, H, n, n) maps of the images' bytes: load_image, its Pillow processor, the model."""
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pixels = processor([load_image(Image.open(io.BytesIO(data))) for data in images], return_tensors="pt")
    extra = {"interpolate_pos_encoding": True} if type(model).__name__.startswith("ViT") else {}
    with torch.no_grad():
        out = model(pixel_values=pixels["pixel_values"], output_attentions=True, **extra)
    return torch.stack(out.attentions, dim=1).numpy()  # (N, L, H, n, n)


def reference_rollout(maps: np.ndarray) -> np.ndarray:
    """(L, H, n, n) -> (n, n), written from the formula: each layer's heads averaged, the identity added, rows
    renormalised; the layers multiplied, the first on the right (float64)."""
    n = maps.shape[-1]
    flow = np.eye(n)
    for layer in maps.astype(np.float64):
        mixed = layer.mean(axis=0) + np.eye(n)
        flow = (mixed / mixed.sum(axis=1, keepdims=True)) @ flow
    return flow


@pytest.fixture(scope="module")
def expected(exported: dict[str, tuple[Path, Path, Any]]) -> dict[str, np.ndarray]:
    return {case: reference_maps(model, source, IMAGES) for case, (source, _, model) in exported.items()}


@pytest.mark.parametrize("case", list(CASES))
async def test_every_map_equals_transformers_cell_by_cell(
    client: httpx.AsyncClient, expected: dict[str, np.ndarray], case: str,
) -> None:
    answer = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS})
    assert [item["shape"] for item in answer["data"]] == [list(maps.shape) for maps in expected[case]]
    for item, maps in zip(answer["data"], expected[case], strict=True):
        assert worst(item["attention"], maps) <= TOLERANCE
    chosen = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS, "layers": [1], "heads": [1, 0],
                                                  "encoding": "base64"})
    for item, maps in zip(chosen["data"], expected[case], strict=True):
        values = np.frombuffer(base64.b64decode(item["attention"]), dtype="<f4").reshape(item["shape"])
        assert worst(values, maps[[1]][:, [1, 0]]) <= TOLERANCE


@pytest.mark.parametrize("case", list(CASES))
async def test_tokens_are_named_and_the_grid_places_the_patches(client: httpx.AsyncClient, case: str) -> None:
    rows, cols, first = CASES[case]
    answer = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS[0], "layers": [0], "heads": [0]})
    grid = answer["grid"]
    assert (grid["rows"], grid["cols"], grid["first"], grid["class_token"]) == (rows, cols, first, True)
    assert grid["rows"] * grid["patch_size"] <= grid["height"] and grid["cols"] * grid["patch_size"] <= grid["width"]
    tokens = answer["data"][0]["tokens"]
    names = ["[CLS]", *(f"[REG {r}]" for r in range(first - 1)),
             *(f"patch {r},{c}" for r in range(rows) for c in range(cols))]
    assert [t["text"] for t in tokens] == names
    assert [t["id"] for t in tokens] == list(range(len(names)))
    assert [t["special"] for t in tokens] == [True] * first + [False] * rows * cols


@pytest.mark.parametrize("case", list(CASES))
async def test_rollout_and_head_mixes_equal_numpy_from_transformers_maps(
    client: httpx.AsyncClient, expected: dict[str, np.ndarray], case: str,
) -> None:
    """Rollout over every layer, and over the last layer alone; its row 0 is the rollout from the class token."""
    rolled = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS, "aggregation": "rollout"})
    last = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS, "aggregation": "rollout",
                                                "layers": [1]})
    mean = await post_ok(client, "/attention", {"model": case, "inputs": ITEMS, "aggregation": "mean"})
    for index, maps in enumerate(expected[case]):
        assert worst(rolled["data"][index]["attention"], reference_rollout(maps)) <= TOLERANCE
        assert worst(last["data"][index]["attention"], reference_rollout(maps[[1]])) <= TOLERANCE
        assert worst(mean["data"][index]["attention"], maps.mean(axis=1)) <= TOLERANCE
        from_class = np.asarray(rolled["data"][index]["attention"])[0]
        assert abs(from_class.sum() - 1) < 1e-5  # a row of the rollout: a distribution over the tokens


async def test_text_answers_are_as_before(client: httpx.AsyncClient) -> None:
    """A text model's answer has no grid, and its tokens are its word pieces."""
    answer = await post_ok(client, "/attention", {"model": "text", "inputs": "a cat", "layers": [0], "heads": [0]})
    assert set(answer) == {"model", "aggregation", "encoding", "dtype", "data"}
    assert answer["data"][0]["tokens"][0]["text"] == "[CLS]" and answer["data"][0]["shape"][:2] == [1, 1]


@pytest.mark.parametrize(("model", "body", "status", "code", "named"), [
    ("vit-small", {"inputs": "a caption"}, 422, "invalid_image", "input 0 is not an image"),
    ("vit-small", {"inputs": [ITEMS[0], "a caption"]}, 422, "invalid_image", "input 1 is not an image"),
    ("vit-small", {"inputs": [{"image": "https://example.com/cat.png"}]}, 422, "image_url_refused", "input 0 is a URL"),
    ("vit-small", {"inputs": [{"image": base64.b64encode(b"no picture").decode()}]}, 422, "invalid_image", "input 0"),
    ("vit-small", {"inputs": ITEMS, "truncate": True}, 422, "not_for_images", "truncate"),
    ("vit-small", {"inputs": ITEMS, "task": "retrieval.query"}, 422, "not_for_images", "task"),
    ("vit-small", {"inputs": ITEMS, "layers": [2]}, 422, "out_of_range", "layers"),
    ("text", {"inputs": [{"image": base64.b64encode(IMAGES[0]).decode()}]}, 422, "unsupported", "reads texts"),
])
async def test_what_is_not_for_this_model_is_refused_before_any_run(
    served: tuple[FastAPI, httpx.AsyncClient], model: str, body: dict[str, Any], status: int, code: str | None,
    named: str,
) -> None:
    app, client = served
    runs = graph_runs(app)
    response = await client.post("/attention", json={"model": model, **body})
    assert named in assert_error(response, status, code)["message"]
    assert graph_runs(app) == runs
    await post_ok(client, "/attention", {"model": "vit-small", "inputs": ITEMS[0]})  # still serving


async def test_the_attention_caps_count_an_image_as_its_tokens(exported: dict[str, tuple[Path, Path, Any]]) -> None:
    """17 tokens of the ViT: 2 layers x 2 heads x 17 x 17 float32 maps are 4,624 bytes an image, refused before any
    image is decoded under a graph cap below that."""
    async with serving(exported["vit-small"][1], intra_op_threads=1, attention_graph_cap_bytes=4_000) as (app, client):
        runs = graph_runs(app)
        refused = await client.post("/attention", json={"inputs": [{"image": "bm90IGFuIGltYWdl"}]})
        assert "ATTNSERVE_ATTENTION_GRAPH_CAP_BYTES" in assert_error(refused, 422, "attention_too_large")["message"]
        assert graph_runs(app) == runs
        await post_ok(client, "/attention", {"inputs": ITEMS[0], "layers": [0]})  # 2,312 bytes: under the cap


async def test_the_document_offers_images_to_attention_where_an_image_model_is_served(
    client: httpx.AsyncClient, tiny_bundle: Path,
) -> None:
    def branches(document: dict[str, Any]) -> list[str]:
        schema = document["components"]["schemas"]["AttentionRequest"]["properties"]["inputs"]
        return ["images" if "ImageItem" in str(b) else b.get("type", "?") for b in schema["anyOf"]]

    both = (await client.get("/openapi.json")).json()
    assert branches(both) == ["string", "array", "images", "images"]
    assert "grid" in both["components"]["schemas"]["AttentionResponse"]["properties"]
    assert "data:image/png;base64" in both["paths"]["/attention"]["post"]["description"]
    async with serving(tiny_bundle, intra_op_threads=1) as (_, texts):
        assert branches((await texts.get("/openapi.json")).json()) == ["string", "array"]
