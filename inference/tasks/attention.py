"""Looking inside a served model: attention maps over real tokens (selected by layer and head, aggregated),
and the graphs' raw outputs with or without attention maps, for one request that asks for both (the Open
Inference Protocol's tensors). Both go through `ServedModel.run`: admitted and tokenised once, the attention
cap checked on the token counts before any graph runs. An attention graph that takes the layers and heads to compute
is run for only those asked for (its batch kind names them: inference.runtime.graphs.BatchKind); an older one computes
every map, and the chosen ones are selected from its answer.

An image model's maps (`image_attention`) are over the image's fixed tokens: the class token, the registers, then one
per patch, row by row (`PatchGrid` says where each lies); they go through `ServedModel.run_images` with the same
selection, the same caps (an image counts as its tokens) and the same aggregations (rollout's row 0: the rollout from
the class token).

Shape letters: N inputs, D hidden, C labels, L layers, H heads, l and h the chosen ones, n real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from bundle.manifest import Manifest
from inference import postprocess
from inference.errors import OutOfRange, Unsupported
from inference.limits import AttentionQuery, Inputs, check_attention_size, check_finite
from inference.results import AttentionMap, GraphOutputs, Token
from inference.runtime.graphs import ATTENTION, FAST, VIEWS, BatchKind, Outputs
from inference.runtime.tokenize import Direction, Encoded
from inference.served import Check, ServedModel
from inference.tasks.embed import tokens


async def attention(
    model: ServedModel, inputs: Inputs, query: AttentionQuery, *, truncate: bool | None = None,
    direction: Direction = "right",
) -> list[AttentionMap]:
    """Per input, its tokens and its attention maps."""
    return (await graph_outputs(model, inputs, fast=False, query=query, truncate=truncate,
                                direction=direction)).attention or []


async def graph_outputs(
    model: ServedModel, inputs: Inputs, *, fast: bool = True, query: AttentionQuery | None = None,
    truncate: bool | None = None, direction: Direction = "right", views: Sequence[BatchKind] = (), prompt: str = "",
) -> GraphOutputs:
    """The fast graph's outputs stacked (embeddings (N, D) pooled, not normalised; logits (N, C) with
    labels) when `fast`, each of `views`' outputs (e.g. SPARSE: sparse (N, V)), and the attention maps
    `query` asks for when given, of the texts after `prompt`; one admission either way."""
    maps_kind, left = ATTENTION, query  # left: what is still to select from the run's maps
    if query is not None:
        check_attention_query(model, query)
        maps_kind, left = attention_run(model, query)
    kinds = ([FAST] if fast else []) + list(views) + ([maps_kind] if query is not None else [])
    encoded, outputs = await model.run(inputs, kinds, truncate, direction, check=attention_cap(model, query),
                                       prompt=prompt)
    values = {}
    if fast:
        values = {name: postprocess.stacked(outputs[FAST], name) for name in outputs[FAST][0]}  # (N, D), (N, C)
    for kind in views:
        values[VIEWS[kind]] = postprocess.stacked(outputs[kind], VIEWS[kind])  # e.g. (N, V)
    maps = await model.off_loop(attention_maps, encoded, outputs[maps_kind], left) if left is not None else None
    return GraphOutputs(values, [e.length for e in encoded], maps)


def check_attention_query(model: ServedModel, query: AttentionQuery) -> None:
    """Unsupported without an attention graph; OutOfRange for a layer or head past the model's."""
    model.require("attention", "give attention maps (manifest.json graphs has no kind 'attention')")
    check_indices(model, query.layers, query.heads)


def attention_run(model: ServedModel, query: AttentionQuery) -> tuple[BatchKind, AttentionQuery]:
    """The batch kind whose run gives `query`'s maps, and what is left to select from its answer: a graph that takes
    the layers and heads computes just those (nothing left to select), an older one every map."""
    if not model.bundle.graphs["attention"].selects or (query.layers is None and query.heads is None):
        return ATTENTION, query
    m = model.bundle.manifest
    layers = query.layers if query.layers is not None else range(m.num_layers)
    heads = query.heads if query.heads is not None else range(m.num_heads)
    return replace(ATTENTION, layers=tuple(layers), heads=tuple(heads)), replace(query, layers=None, heads=None)


def check_indices(model: ServedModel, layers: list[int] | None, heads: list[int] | None) -> None:
    """OutOfRange for a layer or head index past the model's, or repeated (None: all of them): the attention graph
    computes, and holds the queries and keys of, each index it is given, so at most every layer and head."""
    m = model.bundle.manifest
    for name, chosen, size in (("layers", layers, m.num_layers), ("heads", heads, m.num_heads)):
        if chosen is not None and (not chosen or min(chosen) < 0 or max(chosen) >= size
                                   or len(set(chosen)) != len(chosen)):
            raise OutOfRange(f"{name} must be a non-empty list of distinct indices in [0, {size})")


def attention_cap(model: ServedModel, query: AttentionQuery | None) -> Check | None:
    if query is None:
        return None
    m = model.bundle.manifest

    def check(encoded: list[Encoded]) -> None:
        check_attention_size(model.limits, encoded, query, m.num_layers, m.num_heads,
                             model.bundle.graphs["attention"].selects)

    return check


def attention_maps(encoded: list[Encoded], outputs: list[Outputs], query: AttentionQuery) -> list[AttentionMap]:
    """Runs in the executor: select, aggregate, and check the finiteness of what is answered (once)."""
    return [one_map(tokens(e), out, query, index)
            for index, (e, out) in enumerate(zip(encoded, outputs, strict=True))]


def one_map(named: list[Token], out: Outputs, query: AttentionQuery, index: int) -> AttentionMap:
    """One input's maps selected and aggregated, checked finite (input `index` named if not)."""
    chosen = postprocess.select(out["attentions"], query.layers, query.heads)  # (l, h, n, n)
    values = postprocess.aggregate(chosen, query.aggregation)
    check_finite(values, "attentions", index)  # probabilities in [0, 1]: no overflow in a float16 cast
    return AttentionMap(named, values)


# -- images ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PatchGrid:
    """Where an image model's tokens lie: `first` tokens before the patches (the class token when `class_token`,
    then the registers), then `rows` x `cols` patches read row by row, each `patch_size` pixels square of the
    `height` x `width` image the model reads (the bundle's one size)."""

    rows: int
    cols: int
    first: int
    class_token: bool
    patch_size: int
    height: int
    width: int

    def names(self) -> list[str]:
        """Each token's name, in order: "[CLS]", "[REG 0]", ..., "patch 0,0", "patch 0,1", ... ("patch row,col")."""
        lead = ["[CLS]"] if self.class_token else []
        lead += [f"[REG {r}]" for r in range(self.first - len(lead))]
        return lead + [f"patch {r},{c}" for r in range(self.rows) for c in range(self.cols)]

    def tokens(self) -> list[Token]:
        """The tokens as a map's answer lists them: id the position, special all but the patches."""
        return [Token(i, name, 0, 0, i < self.first) for i, name in enumerate(self.names())]


def patch_grid(manifest: Manifest) -> PatchGrid:
    """An image model's grid, from its manifest's image section and model config (a class token unless the config
    says none: SigLIP's)."""
    spec = manifest.image
    assert spec is not None, "an image model's manifest has an image section"
    rows, cols = spec.height // spec.patch_size, spec.width // spec.patch_size
    return PatchGrid(rows, cols, spec.tokens - rows * cols, bool(manifest.model_config_.get("class_token", True)),
                     spec.patch_size, spec.height, spec.width)


async def image_attention(
    model: ServedModel, images: Sequence[bytes], query: AttentionQuery,
) -> tuple[PatchGrid, list[AttentionMap]]:
    """An image model's grid and, per image (its bytes), its tokens and maps, as `attention` gives a text's: the
    query and the caps checked before any image is decoded (each image counts as its tokens). A two-tower model's
    images go to its image tower (`ServedModel.for_images`), whose maps they are."""
    model = model.for_images()
    if model.bundle.manifest.image is None:
        raise Unsupported(f"model {model.name} reads texts, not images; send it texts (GET /info lists each model's "
                          "modalities)")
    grid = patch_grid(model.bundle.manifest)
    check_attention_query(model, query)
    maps_kind, left = attention_run(model, query)
    placeholders = [Encoded(np.zeros(grid.first + grid.rows * grid.cols, dtype=np.int64))] * len(images)
    check = attention_cap(model, query)
    if check is not None:
        check(placeholders)  # the caps count tokens: an image's are fixed
    outputs = (await model.run_images(images, [maps_kind]))[maps_kind]
    return grid, await model.off_loop(image_maps, grid.tokens(), outputs, left)


def image_maps(named: list[Token], outputs: list[Outputs], query: AttentionQuery) -> list[AttentionMap]:
    """Runs in the executor: each image's maps, as `attention_maps` gives a text's."""
    return [one_map(named, out, query, index) for index, out in enumerate(outputs)]
