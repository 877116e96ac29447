"""What a request may ask of a served model, checked before any work: input counts and lengths, embedding
dimensions, attention layers and heads, and the size of the large answers (attention maps, per-token
vectors), estimated from the token counts before the graph runs. Plain functions of the limits and the
model's sizes; each raises the domain error from `inference.errors` that names its setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from inference import postprocess
from inference.errors import (
    AttentionTooLarge,
    InputTooLong,
    InvalidImage,
    InvalidRequest,
    NonFiniteOutput,
    OutOfRange,
    ResponseTooLarge,
    TooManyInputs,
)
from inference.options import RequestLimits
from inference.runtime.tokenize import Encoded, Pair

Inputs = Sequence[str] | Sequence[Sequence[int]] | Sequence[Pair | str]  # texts, token-id lists, text pairs
Aggregation = Literal["none", "mean", "max", "rollout"]
Encoding = Literal["float", "base64", "binary"]  # how the answer will carry the values: bounds its size
TOKEN_JSON_BYTES = 96  # upper bound for one token's {id, text, start, stop, special} in an answer
JSON_BYTES_PER_FLOAT = 16  # upper bound for one float32 written as JSON, with its separator


@dataclass(frozen=True)
class AttentionQuery:
    layers: list[int] | None = None  # None: all
    heads: list[int] | None = None
    aggregation: Aggregation = "none"
    encoding: Encoding = "float"
    dtype: Literal["float16", "float32"] = "float32"  # of base64 values


def check_inputs(limits: RequestLimits, inputs: Inputs, chunked: bool = False) -> None:
    """InvalidRequest, TooManyInputs or InputTooLong, by `limits` resolved for the model (`RequestLimits.for_model`)."""
    if not inputs:
        raise InvalidRequest("inputs must not be empty")
    if len(inputs) > limits.max_inputs:
        raise TooManyInputs(
            f"{len(inputs)} inputs exceed the limit of {limits.max_inputs} per request (ATTNSERVE_MAX_INPUTS)"
        )
    limit = limits.max_chunked_input_chars if chunked else limits.max_input_chars
    if limit is None:
        raise TypeError("check_inputs takes limits resolved for the model (RequestLimits.for_model)")
    setting = "ATTNSERVE_MAX_CHUNKED_INPUT_CHARS" if chunked else limits.input_chars_source()
    for index, item in enumerate(inputs):
        for text in item if isinstance(item, tuple) else (item,):  # a pair: each of its texts
            if isinstance(text, str) and len(text) > limit:
                raise InputTooLong(f"input {index} has {len(text)} characters, over the limit of {limit} ({setting})")


def check_images(limits: RequestLimits, images: Sequence[bytes]) -> None:
    """InvalidRequest, TooManyInputs, or InvalidImage (image_too_large) for an image over max_image_bytes: by
    `limits`, before any image is decoded."""
    if not images:
        raise InvalidRequest("inputs must not be empty")
    if len(images) > limits.max_inputs:
        raise TooManyInputs(
            f"{len(images)} images exceed the limit of {limits.max_inputs} per request (ATTNSERVE_MAX_INPUTS)")
    for index, data in enumerate(images):
        if len(data) > limits.max_image_bytes:
            raise InvalidImage(f"input {index} has {len(data)} bytes, over the limit of {limits.max_image_bytes} per "
                               "image (ATTNSERVE_MAX_IMAGE_BYTES)", code="image_too_large")


def check_dimensions(dimensions: int | None, hidden: int) -> None:
    if dimensions is not None and not 1 <= dimensions <= hidden:
        raise OutOfRange(f"dimensions must be between 1 and the model's {hidden}")


def check_attention_size(
    limits: RequestLimits, encoded: list[Encoded], query: AttentionQuery, num_layers: int, num_heads: int,
    selects: bool = True,
) -> None:
    """AttentionTooLarge for an answer over the attention cap, or maps over the graph cap: those asked for when the
    graph computes only those (`selects`), else every layer's and head's."""
    layers = len(query.layers) if query.layers is not None else num_layers
    heads = len(query.heads) if query.heads is not None else num_heads
    total = 0
    for e in encoded:
        count = int(np.prod(postprocess.aggregated_shape(layers, heads, e.length, query.aggregation)))
        total += estimated_bytes(count, query.encoding, query.dtype) + TOKEN_JSON_BYTES * e.length
    cap = limits.attention_cap_bytes
    if total > cap:
        raise AttentionTooLarge(
            f"the attention response would take about {total} bytes, over the cap of {cap} bytes "
            "(ATTNSERVE_ATTENTION_CAP_BYTES); ask for fewer inputs, layers or heads, or aggregate them"
        )
    maps = layers * heads if selects else num_layers * num_heads
    computed = sum(4 * maps * e.length * e.length for e in encoded)  # the (T, T) maps computed, float32
    if computed > limits.attention_graph_cap_bytes:
        what = "the layers and heads asked for" if selects else "every layer and head, whatever is selected"
        raise AttentionTooLarge(
            f"the attention graph would compute {computed} bytes of maps ({what}, of every input), over the cap "
            f"of {limits.attention_graph_cap_bytes} bytes (ATTNSERVE_ATTENTION_GRAPH_CAP_BYTES); send fewer or "
            f"shorter inputs{', or ask for fewer layers and heads' if selects else ''}"
        )


def check_embed_all_size(limits: RequestLimits, encoded: list[Encoded], hidden: int) -> None:
    cap = limits.embed_all_cap_bytes
    total = estimated_bytes(sum(e.length for e in encoded) * hidden, "float", "float32")
    if total > cap:
        raise ResponseTooLarge(
            f"the /embed_all response would take about {total} bytes, over the cap of {cap} bytes "
            "(ATTNSERVE_EMBED_ALL_CAP_BYTES); send fewer or shorter inputs"
        )


def estimated_bytes(count: int, encoding: str, dtype: str) -> int:
    """Bytes that `count` values take in an answer."""
    if encoding == "float":
        return count * JSON_BYTES_PER_FLOAT
    if encoding == "binary":
        return count * 4  # float32
    width = 2 if dtype == "float16" else 4
    return (count * width + 2) // 3 * 4


def check_finite(value: np.ndarray, name: str, index: int) -> None:
    if not np.isfinite(value).all():
        raise NonFiniteOutput(f"the model produced NaN or Inf in {name} for input {index}")
