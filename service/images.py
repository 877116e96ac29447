"""Images as clients send them in JSON, to the bytes the core decodes (inference.served.ServedModel.run_images).

Two shapes, as the embedding APIs that take images write them:
    "data:image/png;base64,iVBOR..."     a data URI, as a string input (OpenAI-style clients, vLLM, Infinity)
    {"image": "data:..." or "iVBOR..."}  an item naming its modality, its value a data URI or bare base64 (Jina's)

A URL is refused unless the operator lists its host (ATTNSERVE_IMAGE_URL_HOSTS; service.fetch): a server that fetches
what a caller names is an SSRF hole (docs/vision.md). The readers here are synchronous, so a URL is fetched only where
a route reads its inputs inside `fetching(...)`: there `decoded` defers a URL of a listed host (a placeholder stands
where its bytes go), and `fetching` fetches each, side by side, and puts its bytes in place; everywhere else a URL is
refused. Bytes that are not base64 are refused naming the input; what the bytes hold (a format, a size, a decodable
picture) is the core's to check.
"""

from __future__ import annotations

import asyncio
import binascii
import re
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from inference.errors import InvalidImage, InvalidRequest, TooManyInputs
from service import fetch

DATA_URI = re.compile(r"data:image/[a-zA-Z0-9.+-]+;base64,", re.ASCII)
URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://", re.ASCII)


class ImageItem(BaseModel):
    """One image input, named as such."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="The image: a data URI (data:image/png;base64,...) or its bare base64. PNG, JPEG, "
                       "WebP or GIF (its first frame). An http(s) URL is fetched only from a host the server lists "
                       "(ATTNSERVE_IMAGE_URL_HOSTS); other URLs are refused.")


# What a request of images cannot ask for, where a route has them: each is about texts
TEXT_ONLY = ("chunking", "prompt_name", "input_type", "instruction", "task", "truncate", "truncation_direction")


def refuse_text_fields(body: BaseModel) -> None:
    """InvalidRequest (not_for_images) naming each field of TEXT_ONLY a request of images sent with a value."""
    if asked := [name for name in TEXT_ONLY if name in body.model_fields_set and getattr(body, name) is not None]:
        raise InvalidRequest(f"{', '.join(asked)} apply to texts, not to images; leave them out of a request of "
                             "images", code="not_for_images")


def is_data_uri(value: str) -> bool:
    return DATA_URI.match(value) is not None


def image_inputs(items: Sequence[Any], reads: Sequence[str]) -> list[bytes | str] | None:
    """The inputs of a request that holds images, each image as its bytes; None for a request of texts (or token
    ids). `reads`: the model's modalities. A request holds images when one of its items is an ImageItem, or a data URI
    for a model that reads images; an image-only model's strings are all read as images (InvalidImage naming the first
    that is not one). A two-tower model reads both: its other strings are texts, kept as given, beside the images."""
    images, texts = "image" in reads, "text" in reads
    if not any(isinstance(item, ImageItem) or (images and isinstance(item, str) and is_data_uri(item))
               for item in items) and (texts or not all(isinstance(item, str) for item in items)):
        return None
    both = images and texts
    return [item if both and isinstance(item, str) and not is_data_uri(item) else _image(item, index)
            for index, item in enumerate(items)]


def modality_inputs(items: Sequence[Any], reads: Sequence[str], modality: str | None) -> list[bytes | str] | None:
    """`image_inputs`, or as the request's `modality` says (Infinity's field): "image" reads every input as an image
    (a data URI, bare base64 or an ImageItem), "text" every one as a text (an ImageItem then refused by index)."""
    if modality is None:
        return image_inputs(items, reads)
    if modality == "image":
        return [decoded(item.image if isinstance(item, ImageItem) else item, index) if isinstance(
            item, (str, ImageItem)) else _image(item, index) for index, item in enumerate(items)]
    found = next((index for index, item in enumerate(items) if isinstance(item, ImageItem)), None)
    if found is not None:
        raise InvalidImage(f"input {found} is an image item, and the request's modality is text")
    return None


def _image(item: Any, index: int) -> bytes:
    if isinstance(item, ImageItem):
        value = item.image
    elif isinstance(item, str) and is_data_uri(item):
        value = item
    else:
        raise InvalidImage(f"input {index} is not an image: a request of images holds images (and, for a model that "
                           'reads both, texts) only, each image a data URI (data:image/png;base64,...) or '
                           '{"image": ...}')
    return decoded(value, index)


def decoded(value: str, index: int) -> bytes:
    """The bytes of a data URI or of bare base64; InvalidImage for what is not base64, and for a URL (deferred
    instead inside `fetching`, where a host is listed)."""
    if URL.match(value):
        if (deferred := _DEFERRED.get()) is not None:
            return _defer(deferred, value, index)
        raise InvalidImage(f"input {index} is a URL: images are fetched only from the hosts a server lists "
                           "(ATTNSERVE_IMAGE_URL_HOSTS), on the routes that take them (docs/vision.md), and this is "
                           "not one (a server fetching what a caller names is an SSRF hole); send the image's bytes "
                           "as a data URI or base64", code="image_url_refused")
    if (found := DATA_URI.match(value)) is not None:
        value = value[found.end():]
    elif value.startswith("data:"):
        raise InvalidImage(f"input {index} is a data URI that is not an image's base64 (data:image/...;base64,...)")
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise InvalidImage(f"input {index} is not base64 (nor a data URI of an image)") from None


R = TypeVar("R", bound=list[bytes | str] | bytes | None)


class _Deferred(bytes):
    """A URL to fetch, standing where its image's bytes go (found by identity)."""


_DEFERRED: ContextVar[list[tuple[int, str, _Deferred]] | None] = ContextVar("deferred_image_urls", default=None)


def _defer(deferred: list[tuple[int, str, _Deferred]], url: str, index: int) -> bytes:
    placeholder = _Deferred(url.encode())
    deferred.append((index, url, placeholder))
    return placeholder


async def fetching(read: Callable[[], R]) -> R:
    """What `read()` answers (image_inputs, modality_inputs, decoded: a list of inputs or one image), each URL of a
    listed host in it fetched (service.fetch; side by side, the others cancelled at the first failure) and put where
    it stood. More inputs than max_inputs are refused before any is fetched."""
    if (fetcher := fetch.current()) is None:
        return read()  # no host listed: a URL is refused
    deferred: list[tuple[int, str, _Deferred]] = []
    token = _DEFERRED.set(deferred)
    try:
        answer = read()
    finally:
        _DEFERRED.reset(token)
    if not deferred:
        return answer
    if (count := len(answer) if isinstance(answer, list) else 1) > fetcher.max_urls:  # before any fetch
        raise TooManyInputs(f"{count} inputs exceed the limit of {fetcher.max_urls} per request (ATTNSERVE_MAX_INPUTS)")
    got = await _together([fetcher.fetch(url, index) for index, url, _ in deferred])
    by_placeholder = {id(placeholder): data for (_, _, placeholder), data in zip(deferred, got, strict=True)}
    if isinstance(answer, list):
        return [by_placeholder.get(id(item), item) for item in answer]  # type: ignore[return-value]
    return by_placeholder.get(id(answer), answer)  # type: ignore[return-value]


async def _together(work: list[Awaitable[bytes]]) -> list[bytes]:
    """Each result, in order; the first failure is raised and the others cancelled."""
    tasks = [asyncio.ensure_future(one) for one in work]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
