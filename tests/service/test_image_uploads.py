"""Images uploaded as multipart/form-data (`curl -F file=@cat.png`) on /embed, /v1/embeddings and
/zero-shot-image-classification, served by a ViT, a CLIP pair and a text model: each upload is answered exactly as the
JSON request with the same images as data URIs (bit for bit: it is that request, service.uploads); the body limit and
the image caps hold as for JSON; a text model, a part that is not an image, an unknown field and a body that is not a
form meet the JSON request's 4xx; the served OpenAPI document offers multipart where an image model is served, and a
text model's server still answers multipart with 415.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from tests.helpers.serving import assert_error, post_ok, serving
from tests.helpers.vision import vit_and_clip

pytestmark = pytest.mark.asyncio(loop_scope="module")
LABELS = ["cat", "dog", "red square"]
LIMIT, IMAGE_CAP, MOST = 120_000, 40_000, 3  # payload_limit_bytes, max_image_bytes, max_inputs


def noise(height: int, width: int, seed: int = 0, fmt: str = "PNG") -> bytes:
    """Seeded noise as `fmt` bytes: noise does not compress, so the size follows the picture's."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = [noise(30, 44, 0), noise(37, 49, 1, "JPEG")]


def data_uri(data: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


def files(*images: bytes, name: str = "file") -> list[tuple[str, tuple[str, bytes, str]]]:
    """What `curl -F file=@0.png -F file=@1.png` sends."""
    return [(name, (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, tiny_bundle: Path) -> list[str]:
    vit, clip = vit_and_clip(tmp_path_factory)
    return [f"vit={vit}", f"clip={clip}", f"text={tiny_bundle}"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(bundles: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(bundles, intra_op_threads=1, cache_bytes=0, payload_limit_bytes=LIMIT,
                       max_image_bytes=IMAGE_CAP, max_inputs=MOST) as (_, served):
        yield served


async def upload(client: httpx.AsyncClient, path: str, data: dict[str, Any], *images: bytes) -> httpx.Response:
    return await client.post(path, data=data, files=files(*images))


async def test_embed_answers_an_upload_as_its_json_request(client: httpx.AsyncClient) -> None:
    for images in ((IMAGES[0],), tuple(IMAGES)):
        sent = await upload(client, "/embed?model=vit", {}, *images)
        assert sent.status_code == 200, sent.text
        assert sent.json() == await post_ok(client, "/embed?model=vit", {"inputs": [data_uri(i) for i in images]})
    raw = await upload(client, "/embed", {"model": "vit", "normalize": "false", "dimensions": "8"}, IMAGES[1])
    expected = await post_ok(client, "/embed", {"model": "vit", "inputs": data_uri(IMAGES[1]), "normalize": False,
                                                "dimensions": 8})
    assert raw.status_code == 200 and raw.json() == expected and len(expected[0]) == 8
    named = await client.post("/embed?model=vit", files=files(IMAGES[0], name="inputs"))  # the JSON field's name
    assert named.json() == (await upload(client, "/embed?model=vit", {}, IMAGES[0])).json()


async def test_openai_embeddings_answer_an_upload_as_its_json_request(client: httpx.AsyncClient) -> None:
    sent = await upload(client, "/v1/embeddings", {"model": "vit", "encoding_format": "base64"}, *IMAGES)
    expected = await post_ok(client, "/v1/embeddings", {"model": "vit", "input": [data_uri(i) for i in IMAGES],
                                                        "encoding_format": "base64"})
    assert sent.status_code == 200 and sent.json() == expected and len(expected["data"]) == 2
    assert {len(base64.b64decode(row["embedding"])) for row in sent.json()["data"]} == {4 * 32}  # float32 x width


async def test_zero_shot_answers_an_upload_with_its_labels_as_fields(client: httpx.AsyncClient) -> None:
    """`-F file=@cat.png -F candidate_labels=cat -F candidate_labels=dog`: repeated fields are the list."""
    form = {"model": "clip", "candidate_labels": LABELS, "hypothesis_template": "a picture of a {}"}
    sent = await upload(client, "/zero-shot-image-classification", form, IMAGES[1])
    expected = await post_ok(client, "/zero-shot-image-classification", {**form, "image": data_uri(IMAGES[1])})
    assert sent.status_code == 200 and sent.json() == expected
    assert sorted(row["label"] for row in expected) == sorted(LABELS)
    two = await upload(client, "/zero-shot-image-classification", form, *IMAGES)  # one image only, as in JSON
    assert "image" in assert_error(two, 422, "validation_error")["message"]


@pytest.mark.parametrize(("path", "form", "images", "json", "status", "code"), [
    # an image for a text model
    ("/embed?model=text", {}, [IMAGES[0]], {"inputs": [{"image": base64.b64encode(IMAGES[0]).decode()}]}, 422,
     "unsupported"),
    ("/zero-shot-image-classification", {"model": "text", "candidate_labels": LABELS}, [IMAGES[0]],
     {"model": "text", "candidate_labels": LABELS, "image": data_uri(IMAGES[0])}, 422, "unsupported"),
    # a part that is not an image
    ("/v1/embeddings", {"model": "vit"}, [b"plain text, not a picture"],
     {"model": "vit", "input": [{"image": base64.b64encode(b"plain text, not a picture").decode()}]}, 422,
     "invalid_image"),
    # an unknown field (/embed's request forbids them; OpenAI's ignores them, as its clients send `user`)
    ("/embed?model=vit", {"colour": "red"}, [IMAGES[0]], {"inputs": [data_uri(IMAGES[0])], "colour": "red"}, 422,
     "validation_error"),
    # a field of the wrong type, a field for texts
    ("/embed?model=vit", {"normalize": "maybe"}, [IMAGES[0]], {"inputs": [data_uri(IMAGES[0])], "normalize": "maybe"},
     422, "validation_error"),
    ("/embed?model=vit", {"truncate": "true"}, [IMAGES[0]], {"inputs": [data_uri(IMAGES[0])], "truncate": True}, 422,
     "not_for_images"),
    # the caps: images per request, bytes per image
    ("/embed?model=vit", {}, [IMAGES[0]] * (MOST + 1), {"inputs": [data_uri(IMAGES[0])] * (MOST + 1)}, 422,
     "too_many_inputs"),
    ("/embed?model=vit", {}, [noise(120, 120, 7)], {"inputs": [data_uri(noise(120, 120, 7))]}, 422,
     "image_too_large"),
    # no image at all
    ("/embed?model=vit", {"normalize": "true"}, [], {"normalize": True}, 422, "validation_error"),
])
async def test_an_upload_meets_the_refusals_of_its_json_request(
    client: httpx.AsyncClient, path: str, form: dict[str, Any], images: list[bytes], json: dict[str, Any],
    status: int, code: str,
) -> None:
    as_json = await client.post(path, json=json)
    expected = assert_error(as_json, status, code)
    if images:
        sent = await client.post(path, data=form, files=files(*images))
    else:  # httpx sends a url-encoded form when no file is given: a form of text fields only, by hand
        parts = [f'--xyz\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in form.items()]
        sent = await client.post(path, content=("".join(parts) + "--xyz--\r\n").encode(),
                                 headers={"content-type": "multipart/form-data; boundary=xyz"})
    got = assert_error(sent, status, code)
    assert _unaddressed(got["message"]) == _unaddressed(expected["message"])
    await _still_serving(client)


def _unaddressed(message: str) -> str:
    """Pillow names the buffer it could not read by its address (<_io.BytesIO object at 0x...>)."""
    return re.sub(r" at 0x[0-9a-f]+", "", message)


async def test_the_body_limit_and_a_body_that_is_not_a_form(client: httpx.AsyncClient) -> None:
    big = noise(230, 230, 3)  # over the body limit as sent
    assert len(big) > LIMIT
    assert "ATTNSERVE_PAYLOAD_LIMIT_BYTES" in assert_error(await upload(client, "/embed?model=vit", {}, big), 413,
                                                             "payload_too_large")["message"]
    broken = await client.post("/embed?model=vit", content=b"--abc\r\nnot a part",
                               headers={"content-type": "multipart/form-data"})  # no boundary
    assert "multipart" in assert_error(broken, 422, "validation_error")["message"]
    await _still_serving(client)


async def test_the_document_offers_uploads_where_an_image_model_is_served(
    client: httpx.AsyncClient, tiny_bundle: Path,
) -> None:
    document = (await client.get("/openapi.json")).json()
    for path, many in (("/embed", True), ("/v1/embeddings", True), ("/zero-shot-image-classification", False),
                       ("/classify", True)):
        if path not in document["paths"]:
            continue  # no served model classifies
        content = document["paths"][path]["post"]["requestBody"]["content"]
        assert set(content) == {"application/json", "multipart/form-data"}, path
        form = content["multipart/form-data"]["schema"]
        file = form["properties"]["file"]
        assert (file["type"], file.get("maxItems")) == (("array", MOST) if many else ("string", None))
        assert "file" in form["required"]
        for name, field in form["properties"].items():  # each other field is the JSON request's own
            if name != "file":
                schema, _, where = field["$ref"].removeprefix("#/components/schemas/").partition("/properties/")
                assert where == name and name in document["components"]["schemas"][schema]["properties"]
    assert "candidate_labels" in document["paths"]["/zero-shot-image-classification"]["post"]["requestBody"][
        "content"]["multipart/form-data"]["schema"]["required"]
    async with serving(tiny_bundle, intra_op_threads=1) as (_, texts):
        document = (await texts.get("/openapi.json")).json()
        assert all("multipart/form-data" not in op["requestBody"]["content"]
                   for item in document["paths"].values() for op in item.values() if "requestBody" in op)
        refused = await texts.post("/embed", files=files(IMAGES[0]))
        assert_error(refused, 415, "unsupported_media_type")


async def _still_serving(client: httpx.AsyncClient) -> None:
    assert (await upload(client, "/embed?model=vit", {}, IMAGES[0])).status_code == 200
