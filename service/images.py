"""Images as clients send them in JSON, to the bytes the core decodes (inference.served.ServedModel.run_images).

Two shapes, as the embedding APIs that take images write them:
    "data:image/png;base64,iVBOR..."     a data URI, as a string input (OpenAI-style clients, vLLM, Infinity)
    {"image": "data:..." or "iVBOR..."}  an item naming its modality, its value a data URI or bare base64 (Jina's)

A URL is refused, never fetched: a server that fetches what a caller names is an SSRF hole (docs/vision.md). Bytes
that are not base64 are refused naming the input; what the bytes hold (a format, a size, a decodable picture) is the
core's to check.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from inference.errors import InvalidImage, InvalidRequest

DATA_URI = re.compile(r"data:image/[a-zA-Z0-9.+-]+;base64,", re.ASCII)
URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://", re.ASCII)


class ImageItem(BaseModel):
    """One image input, named as such."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="The image: a data URI (data:image/png;base64,...) or its bare base64. PNG, JPEG, "
                       "WebP or GIF (its first frame). URLs are refused, never fetched.")


# What a request of images cannot ask for, where a route has them: each is about texts
TEXT_ONLY = ("chunking", "prompt_name", "input_type", "instruction", "task", "truncate")


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
    """The bytes of a data URI or of bare base64; InvalidImage for a URL or for what is not base64."""
    if URL.match(value):
        raise InvalidImage(f"input {index} is a URL: images are not fetched from URLs (a server fetching what a "
                           "caller names is an SSRF hole); send the image's bytes as a data URI or base64",
                           code="image_url_refused")
    if (found := DATA_URI.match(value)) is not None:
        value = value[found.end():]
    elif value.startswith("data:"):
        raise InvalidImage(f"input {index} is a data URI that is not an image's base64 (data:image/...;base64,...)")
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise InvalidImage(f"input {index} is not base64 (nor a data URI of an image)") from None
