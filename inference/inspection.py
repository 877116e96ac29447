"""Looking inside a served model: attention maps over real tokens (selected by layer and head, aggregated),
and the graphs' raw outputs with or without attention maps, for one request that asks for both (the Open
Inference Protocol's tensors). Both go through `ServedModel.run`: admitted and tokenised once, the attention
cap checked on the token counts before any graph runs.

Shape letters: N inputs, D hidden, C labels, L layers, H heads, l and h the chosen ones, n real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from inference import postprocess
from inference.errors import OutOfRange
from inference.graphs import VIEWS, Outputs
from inference.limits import AttentionQuery, Inputs, check_attention_size, check_finite
from inference.operations import tokens
from inference.results import AttentionMap, GraphOutputs
from inference.served import Check, ServedModel
from inference.tokenize import Direction, Encoded


async def attention(
    model: ServedModel, inputs: Inputs, query: AttentionQuery, *, truncate: bool | None = None,
    direction: Direction = "right",
) -> list[AttentionMap]:
    """Per input, its tokens and its attention maps."""
    return (await graph_outputs(model, inputs, fast=False, query=query, truncate=truncate,
                                direction=direction)).attention or []


async def graph_outputs(
    model: ServedModel, inputs: Inputs, *, fast: bool = True, query: AttentionQuery | None = None,
    truncate: bool | None = None, direction: Direction = "right", views: Sequence[str] = (), prompt: str = "",
) -> GraphOutputs:
    """The fast graph's outputs stacked (embeddings (N, D) pooled, not normalised; logits (N, C) with
    labels) when `fast`, each of `views`' outputs (e.g. SPARSE: sparse (N, V)), and the attention maps
    `query` asks for when given, of the texts after `prompt`; one admission either way."""
    kinds = (["fast"] if fast else []) + list(views) + (["attention"] if query is not None else [])
    if query is not None:
        check_attention_query(model, query)
    encoded, outputs = await model.run(inputs, kinds, truncate, direction, check=attention_cap(model, query),
                                       prompt=prompt)
    values = {}
    if fast:
        values = {name: postprocess.stacked(outputs["fast"], name) for name in outputs["fast"][0]}  # (N, D), (N, C)
    for kind in views:
        values[VIEWS[kind]] = postprocess.stacked(outputs[kind], VIEWS[kind])  # e.g. (N, V)
    maps = await model.off_loop(attention_maps, encoded, outputs["attention"], query) if query is not None else None
    return GraphOutputs(values, [e.length for e in encoded], maps)


def check_attention_query(model: ServedModel, query: AttentionQuery) -> None:
    """Unsupported without an attention graph; OutOfRange for a layer or head past the model's."""
    model.require("attention", "give attention maps (manifest.json graphs has no kind 'attention')")
    check_indices(model, query.layers, query.heads)


def check_indices(model: ServedModel, layers: list[int] | None, heads: list[int] | None) -> None:
    """OutOfRange for a layer or head index past the model's (None: all of them)."""
    m = model.bundle.manifest
    for name, chosen, size in (("layers", layers, m.num_layers), ("heads", heads, m.num_heads)):
        if chosen is not None and (not chosen or min(chosen) < 0 or max(chosen) >= size):
            raise OutOfRange(f"{name} must be a non-empty list of indices in [0, {size})")


def attention_cap(model: ServedModel, query: AttentionQuery | None) -> Check | None:
    if query is None:
        return None
    m = model.bundle.manifest

    def check(encoded: list[Encoded]) -> None:
        check_attention_size(model.limits, encoded, query, m.num_layers, m.num_heads)

    return check


def attention_maps(encoded: list[Encoded], outputs: list[Outputs], query: AttentionQuery) -> list[AttentionMap]:
    """Runs in the executor: select, aggregate, and check the finiteness of what is answered (once)."""
    maps = []
    for index, (e, out) in enumerate(zip(encoded, outputs, strict=True)):
        chosen = postprocess.select(out["attentions"], query.layers, query.heads)  # (l, h, n, n)
        values = postprocess.aggregate(chosen, query.aggregation)
        check_finite(values, "attentions", index)  # probabilities in [0, 1]: no overflow in a float16 cast
        maps.append(AttentionMap(tokens(e), values))
    return maps
