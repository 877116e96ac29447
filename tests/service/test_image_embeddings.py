"""Images on POST /v1/embeddings and TEI's /embed: an image bundle (a random-weight DINOv2 with registers served at a
non-square 24 x 40, and a ViT) served beside a text bundle, sent data URIs and {"image": base64} items of PNG, JPEG,
WebP and GIF bytes; the vectors equal transformers' (its Pillow image processor and model on the same bytes) to 1e-5,
each image's bit for bit alone and in a batch; /info says each model's modality; what is not an image, or not for
this model, is refused by name (422, the one error shape) before any graph runs, and the server keeps serving.
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
from transformers.image_utils import load_image

from tests.helpers.serving import assert_error, post_ok, serving, uvicorn_here, worst
from tests.helpers.vision import reference_model, shared_bundle

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
CASES = ("dinov2-registers-small", "vit-small")


def picture(index: int, fmt: str) -> bytes:
    """Seeded noise of a size of its own, as `fmt` bytes."""
    rng = np.random.default_rng(index)
    pixels = rng.integers(0, 256, size=(30 + 7 * index, 44 + 5 * index, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = [picture(0, "PNG"), picture(1, "JPEG"), picture(2, "WEBP"), picture(3, "GIF")]


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, torch.nn.Module]]:
    """Each case (tests.helpers.vision.shared_bundle)'s (source, bundle, reference model)."""
    out = {}
    for case in CASES:
        source, bundle = shared_bundle(tmp_path_factory, case)
        out[case] = (source, bundle, reference_model(case, source))
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(exported: dict[str, tuple[Path, Path, Any]], tiny_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    bundles = [f"{case}={bundle}" for case, (_, bundle, _) in exported.items()] + [f"text={tiny_bundle}"]
    async with serving(bundles, intra_op_threads=1, cache_bytes=0) as (_, served):  # every image runs
        yield served


def reference(model: torch.nn.Module, source: Path, images: list[bytes]) -> np.ndarray:
    """transformers' pooled vectors of the images' bytes as its pipelines read them (load_image, RGB), its Pillow
    processor, then the model."""
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    opened = [load_image(Image.open(io.BytesIO(data))) for data in images]
    pixels = processor(opened, return_tensors="pt")["pixel_values"]
    extra = {"interpolate_pos_encoding": True} if type(model).__name__.startswith("ViT") else {}
    with torch.no_grad():
        return model(pixel_values=pixels, **extra).pooler_output.numpy()


@pytest.mark.parametrize("case", CASES)
async def test_image_vectors_equal_transformers_alone_and_batched(
    client: httpx.AsyncClient, exported: dict[str, tuple[Path, Path, Any]], case: str,
) -> None:
    source, _, model = exported[case]
    expected = reference(model, source, IMAGES)
    items: list[Any] = [data_uri(IMAGES[0]), {"image": base64.b64encode(IMAGES[1]).decode()},
                        data_uri(IMAGES[2], "image/webp"), {"image": data_uri(IMAGES[3], "image/gif")}]
    answer = await post_ok(client, "/v1/embeddings", {"model": case, "input": items})
    batched = np.asarray([row["embedding"] for row in answer["data"]], dtype=np.float32)
    assert worst(batched, expected) <= TOLERANCE
    tokens = (await client.get("/info")).json()["models"][CASES.index(case)]["image"]["tokens"]
    assert answer["usage"]["prompt_tokens"] == len(IMAGES) * tokens
    for index, item in enumerate(items):
        alone = await post_ok(client, "/v1/embeddings", {"model": case, "input": [item]})
        assert np.array_equal(np.asarray(alone["data"][0]["embedding"], dtype=np.float32), batched[index])
    one = await post_ok(client, "/v1/embeddings", {"model": case, "input": data_uri(IMAGES[0]),
                                                   "encoding_format": "base64", "dimensions": 8})
    cut = np.frombuffer(base64.b64decode(one["data"][0]["embedding"]), dtype="<f4")
    assert cut.shape == (8,) and abs(float(np.linalg.norm(cut)) - 1) < 1e-6  # cut, then renormalised


async def test_tei_embed_takes_image_items_as_the_openai_route_does(client: httpx.AsyncClient) -> None:
    """/embed: one {"image": ...} item, or a list of items and data URIs; normalised unless normalize=false, as for
    texts; the same vectors as /v1/embeddings (whose normalisation is the model's)."""
    items: list[Any] = [{"image": base64.b64encode(IMAGES[0]).decode()}, data_uri(IMAGES[1], "image/jpeg")]
    raw = await post_ok(client, "/embed?model=vit-small", {"inputs": items, "normalize": False})
    openai = await post_ok(client, "/v1/embeddings", {"model": "vit-small", "input": items})
    assert np.array_equal(np.asarray(raw, dtype=np.float32),
                          np.asarray([row["embedding"] for row in openai["data"]], dtype=np.float32))
    one = await post_ok(client, "/embed?model=vit-small", {"inputs": items[0]})
    unit = np.asarray(raw[0], dtype=np.float32) / np.linalg.norm(raw[0])
    assert len(one) == 1 and worst(one[0], unit) <= 1e-6
    refused = await client.post("/embed?model=vit-small", json={"inputs": items, "truncate": True})
    assert "truncate" in assert_error(refused, 422, "not_for_images")["message"]


async def test_info_says_each_model_s_modality(client: httpx.AsyncClient) -> None:
    models = {m["name"]: m for m in (await client.get("/info")).json()["models"]}
    assert models["vit-small"]["modalities"] == ["image"] and models["text"]["modalities"] == ["text"]
    image = models["dinov2-registers-small"]["image"]
    assert (image["height"], image["width"], image["tokens"]) == (24, 40, 1 + 4 + 3 * 5)  # class, registers, 3 x 5
    assert models["text"]["image"] is None


@pytest.mark.parametrize(("model", "item", "code", "named"), [
    ("vit-small", "data:image/png;base64,not base64!", "invalid_image", "input 1 is not base64"),
    ("vit-small", "https://example.com/cat.png", "invalid_image", "input 1 is not an image"),
    ("vit-small", {"image": "https://example.com/cat.png"}, "image_url_refused", "input 1 is a URL"),
    ("vit-small", {"image": base64.b64encode(b"plain text, not a picture").decode()}, "invalid_image", "input 1:"),
    ("vit-small", {"image": base64.b64encode(IMAGES[0][:60]).decode()}, "invalid_image", "input 1:"),
    ("vit-small", {"image": base64.b64encode(b"BM" + bytes(60)).decode()}, "invalid_image", "input 1:"),
    ("vit-small", "a caption, not an image", "invalid_image", "input 1 is not an image"),
    ("text", {"image": base64.b64encode(IMAGES[0]).decode()}, "unsupported", "reads texts, not images"),
])
async def test_what_is_not_an_image_for_this_model_is_refused_by_name(
    client: httpx.AsyncClient, model: str, item: Any, code: str, named: str,
) -> None:
    response = await client.post("/v1/embeddings", json={"model": model, "input": [data_uri(IMAGES[0]), item]})
    assert named in assert_error(response, 422, code)["message"]
    await post_ok(client, "/v1/embeddings", {"model": "vit-small", "input": [data_uri(IMAGES[0])]})  # still serving


async def test_texts_to_an_image_model_and_text_fields_with_images_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"model": "vit-small", "input": ["a caption"]})
    assert "input 0 is not an image" in assert_error(response, 422, "invalid_image")["message"]
    response = await client.post("/v1/embeddings", json={"model": "vit-small", "input": [[101, 2023, 102]]})
    assert "is an image model: it embeds images" in assert_error(response, 422, "unsupported")["message"]
    for field, value in (("prompt_name", "query"), ("input_type", "query"), ("chunking", "mean")):
        response = await client.post("/v1/embeddings", json={"model": "vit-small", "input": [data_uri(IMAGES[0])],
                                                             field: value})
        assert field in assert_error(response, 422, "not_for_images")["message"]


async def test_image_caps_are_checked_before_decoding(exported: dict[str, tuple[Path, Path, Any]]) -> None:
    """Bytes per image and pixels per image, each by its setting; images per request by max_inputs."""
    bundle = exported["vit-small"][1]
    async with serving(bundle, intra_op_threads=1, max_image_bytes=200, max_image_pixels=1000,
                       max_inputs=2) as (_, client):
        big = await client.post("/v1/embeddings", json={"input": [data_uri(IMAGES[0])]})
        assert "ATTNSERVE_MAX_IMAGE_BYTES" in assert_error(big, 422, "image_too_large")["message"]
        small_file = _flat_png(60, 60)  # 3,600 pixels in a few dozen bytes
        assert len(small_file) <= 200
        bomb = await client.post("/v1/embeddings", json={"input": [data_uri(small_file)]})
        assert "pixels" in assert_error(bomb, 422, "image_too_large")["message"]
        many = await client.post("/v1/embeddings", json={"input": [data_uri(small_file)] * 3})
        assert_error(many, 422, "too_many_inputs")


def _flat_png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


async def test_the_document_offers_images_only_where_an_image_model_is_served(
    client: httpx.AsyncClient, exported: dict[str, tuple[Path, Path, Any]], tiny_bundle: Path,
) -> None:
    """Schema fuzzing sends what the document allows: a text-only server's does not offer image items, an
    image-only server's offers images and one string (a data URI), both servers' both."""
    def branches(document: dict[str, Any], name: str = "OpenAIEmbeddingRequest", field: str = "input") -> list[str]:
        schema = document["components"]["schemas"][name]["properties"][field]
        return ["images" if "ImageItem" in str(b) else b.get("type", "?") for b in schema["anyOf"]]

    both = (await client.get("/openapi.json")).json()
    assert "images" in branches(both) and branches(both, "EmbedRequest", "inputs").count("images") == 2
    async with serving(tiny_bundle, intra_op_threads=1) as (_, texts):
        document = (await texts.get("/openapi.json")).json()
        assert "images" not in branches(document) + branches(document, "EmbedRequest", "inputs")
        assert "ImageItem" not in document["components"]["schemas"]
    async with serving(exported["vit-small"][1], intra_op_threads=1) as (_, images):
        document = (await images.get("/openapi.json")).json()
        assert branches(document) == ["string", "images"]
        assert branches(document, "EmbedRequest", "inputs") == ["string", "images", "images"]
        cohere = document["components"]["schemas"]["CohereEmbedRequest"]
        assert [branch["required"] for branch in cohere["oneOf"]] == [["images"], ["inputs"]]
        assert cohere["properties"]["texts"]["type"] == "null"
        parts = document["components"]["schemas"]["CohereInput"]["properties"]["content"]["items"]["oneOf"]
        assert [branch["$ref"] for branch in parts] == ["#/components/schemas/CohereImage"]


async def test_the_answer_cache_keys_an_image_by_its_pixels(exported: dict[str, tuple[Path, Path, Any]]) -> None:
    """With the cache on, the same image again is a hit (the same vector, bit for bit), and so are other bytes that
    decode to the same pixels (a PNG and its data URI with another MIME type); another image is not."""
    async with serving(exported["vit-small"][1], intra_op_threads=1) as (_, client):
        first = await post_ok(client, "/v1/embeddings", {"input": [data_uri(IMAGES[0])]})
        again = await post_ok(client, "/v1/embeddings", {"input": [{"image": data_uri(IMAGES[0], "image/x-png")}]})
        other = await post_ok(client, "/v1/embeddings", {"input": [data_uri(IMAGES[1], "image/jpeg")]})
        metrics = (await client.get("/metrics")).text
    assert first["data"][0]["embedding"] == again["data"][0]["embedding"] != other["data"][0]["embedding"]
    counts = {name: sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name + "{"))
              for name in ("attnserve_cache_hits_total", "attnserve_cache_misses_total")}
    assert counts == {"attnserve_cache_hits_total": 1.0, "attnserve_cache_misses_total": 2.0}, counts



async def test_cohere_embed_takes_an_image_model_s_images(client: httpx.AsyncClient) -> None:
    """/v2/embed with `images` (data URIs, input_type image): the floats /v1/embeddings gives (normalised as the model
    is), base64 of them, and binary codes as sentence-transformers' quantize_embeddings makes them; int8 and uint8
    (calibrated on texts) and texts' fields are refused by name."""
    from sentence_transformers.quantization import quantize_embeddings

    uris = [data_uri(IMAGES[0]), data_uri(IMAGES[1], "image/jpeg")]
    answer = await post_ok(client, "/v2/embed", {"model": "vit-small", "images": uris, "input_type": "image",
                                                 "embedding_types": ["float", "base64", "ubinary"]})
    openai = await post_ok(client, "/v1/embeddings", {"model": "vit-small", "input": uris})
    floats = np.asarray([row["embedding"] for row in openai["data"]], dtype=np.float32)
    assert np.array_equal(np.asarray(answer["embeddings"]["float"], dtype=np.float32), floats)
    assert np.array_equal(np.stack([np.frombuffer(base64.b64decode(b), "<f4") for b in answer["embeddings"]["base64"]]),
                          floats)
    assert answer["embeddings"]["ubinary"] == quantize_embeddings(floats, "ubinary").tolist()
    billed = answer["meta"]["billed_units"]["input_tokens"]
    assert answer["texts"] is None and billed == openai["usage"]["prompt_tokens"]
    int8 = await client.post("/v2/embed", json={"model": "vit-small", "images": uris, "embedding_types": ["int8"]})
    assert "calibrated on texts" in assert_error(int8, 422, "not_for_images")["message"]
    cut = await client.post("/v2/embed", json={"model": "vit-small", "images": uris, "truncate": "START"})
    assert_error(cut, 422, "not_for_images")


async def test_the_cohere_sdk_embeds_images(exported: dict[str, tuple[Path, Path, Any]]) -> None:
    cohere = pytest.importorskip("cohere")
    uri = data_uri(IMAGES[2], "image/webp")
    async with uvicorn_here(exported["vit-small"][1]) as (_, url):
        answer = await cohere.AsyncClientV2(api_key="unused", base_url=url).embed(
            model="any", images=[uri], input_type="image", embedding_types=["float"])
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:  # the server runs in this event loop
            served = (await http.post("/v1/embeddings", json={"input": [uri]})).json()
    assert np.array_equal(np.asarray(answer.embeddings.float_, dtype=np.float32),
                          np.asarray([served["data"][0]["embedding"]], dtype=np.float32))


async def test_the_openai_client_embeds_data_uris(exported: dict[str, tuple[Path, Path, Any]]) -> None:
    """The official OpenAI client's embeddings.create with data URIs as its inputs: the vectors /v1/embeddings gives."""
    openai = pytest.importorskip("openai")
    uris = [data_uri(IMAGES[0]), data_uri(IMAGES[1], "image/jpeg")]
    async with uvicorn_here(exported["vit-small"][1]) as (_, url):
        answer = await openai.AsyncOpenAI(api_key="unused", base_url=f"{url}/v1").embeddings.create(
            model="vit-small", input=uris)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:  # the server runs in this event loop
            served = (await http.post("/v1/embeddings", json={"input": uris})).json()
    got = np.asarray([row.embedding for row in answer.data], dtype=np.float32)  # the client asks for base64
    assert np.array_equal(got, np.asarray([row["embedding"] for row in served["data"]], dtype=np.float32))
    assert answer.usage.prompt_tokens == served["usage"]["prompt_tokens"]
