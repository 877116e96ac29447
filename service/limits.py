"""What a request may ask of an engine, checked before any work: input counts and lengths, embedding
dimensions, attention layers and heads, and the size of the large answers (attention maps, per-token
vectors), estimated from the token counts before the graph runs. Plain functions of the limits and the
model's sizes; each raises the domain error from `service.errors` that names its setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service import postprocess
from service.errors import (
    AttentionTooLarge,
    InputTooLong,
    InvalidRequest,
    NonFiniteOutput,
    OutOfRange,
    ResponseTooLarge,
    TooManyInputs,
)
from service.tokenize import Encoded

Inputs = Sequence[str] | Sequence[Sequence[int]]
TOKEN_JSON_BYTES = 96  # upper bound for one token's {id, text, start, stop, special} in a response


@dataclass(frozen=True)
class EngineLimits:
    max_inputs: int
    max_input_chars: int
    truncate: bool
    attention_cap_bytes: int
    max_chunked_input_chars: int = 100_000
    max_windows_per_input: int = 512
    embed_all_cap_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class AttentionQuery:
    layers: list[int] | None
    heads: list[int] | None
    aggregation: str
    encoding: str
    dtype: str


def check_inputs(limits: EngineLimits, inputs: Inputs, chunked: bool = False) -> None:
    if not inputs:
        raise InvalidRequest("inputs must not be empty")
    if len(inputs) > limits.max_inputs:
        raise TooManyInputs(
            f"{len(inputs)} inputs exceed the limit of {limits.max_inputs} per request (ATTNSERVE_MAX_INPUTS)"
        )
    limit = limits.max_chunked_input_chars if chunked else limits.max_input_chars
    setting = "ATTNSERVE_MAX_CHUNKED_INPUT_CHARS" if chunked else "ATTNSERVE_MAX_INPUT_CHARS"
    for index, text in enumerate(inputs):
        if isinstance(text, str) and len(text) > limit:
            raise InputTooLong(f"input {index} has {len(text)} characters, over the limit of {limit} ({setting})")


def check_dimensions(dimensions: int | None, hidden: int) -> None:
    if dimensions is not None and not 1 <= dimensions <= hidden:
        raise OutOfRange(f"dimensions must be between 1 and the model's {hidden}")


def check_indices(query: AttentionQuery, num_layers: int, num_heads: int) -> None:
    for name, chosen, size in (("layers", query.layers, num_layers), ("heads", query.heads, num_heads)):
        if chosen is not None and (not chosen or min(chosen) < 0 or max(chosen) >= size):
            raise OutOfRange(f"{name} must be a non-empty list of indices in [0, {size})")


def check_attention_size(
    limits: EngineLimits, encoded: list[Encoded], query: AttentionQuery, num_layers: int, num_heads: int,
) -> None:
    layers = len(query.layers) if query.layers is not None else num_layers
    heads = len(query.heads) if query.heads is not None else num_heads
    total = 0
    for e in encoded:
        count = int(np.prod(postprocess.aggregated_shape(layers, heads, e.length, query.aggregation)))
        total += postprocess.estimated_bytes(count, query.encoding, query.dtype) + TOKEN_JSON_BYTES * e.length
    cap = limits.attention_cap_bytes
    if total > cap:
        raise AttentionTooLarge(
            f"the attention response would take about {total} bytes, over the cap of {cap} bytes "
            "(ATTNSERVE_ATTENTION_CAP_BYTES); ask for fewer inputs, layers or heads, or aggregate them"
        )


def check_embed_all_size(limits: EngineLimits, encoded: list[Encoded], hidden: int) -> None:
    cap = limits.embed_all_cap_bytes
    total = postprocess.estimated_bytes(sum(e.length for e in encoded) * hidden, "float", "float32")
    if total > cap:
        raise ResponseTooLarge(
            f"the /embed_all response would take about {total} bytes, over the cap of {cap} bytes "
            "(ATTNSERVE_EMBED_ALL_CAP_BYTES); send fewer or shorter inputs"
        )


def check_finite(value: np.ndarray, name: str, index: int) -> None:
    if not np.isfinite(value).all():
        raise NonFiniteOutput(f"the model produced NaN or Inf in {name} for input {index}")
