"""The graphs' inputs: right-padded token ids and their attention mask, and token type ids where a graph
takes them.

Shape letters: B batch, T the longest sequence in the batch.

Every graph takes input_ids and attention_mask; a graph whose model has two token types (BERT's segment A
and B) may also take token_type_ids. A graph entry's `inputs` in the manifest names exactly what its graph
takes, and onnxruntime refuses a feed it does not take, so a caller builds the feeds a graph lists:
pad(sequences, pad_id, names=[i.name for i in entry.inputs]).

A bundle with LoRA adapters (manifest `adapters`) has graphs that take one more input, `adapter` (B,) int64: each
row's adapter index, i + 1 for the manifest's adapters[i] and 0 for the bare base. pad() builds it from `adapters`
when given, else all 0 (every row the base).

An attention graph may take two more, `layers` (l,) and `heads` (h,) int64: the indices of the layers and heads whose
maps it computes, every one unless fed. They are initializers that are also graph inputs (onnxruntime's overridable
initializers: `session.get_overridable_initializers()`, not `get_inputs()`), so a caller that feeds only the token
inputs gets every map, as from a graph without them; selected(...) builds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

INPUT_NAMES = ("input_ids", "attention_mask")
TOKEN_TYPE_IDS = "token_type_ids"
KNOWN_INPUTS = (*INPUT_NAMES, TOKEN_TYPE_IDS)  # the (B, T) inputs
ADAPTER = "adapter"  # (B,): each row's LoRA adapter index, 0 the base
PIXEL_VALUES = "pixel_values"  # a vision graph's one input: (B, C, H, W) float32 (bundle.preprocessing's steps)
SELECTION = ("layers", "heads")  # an attention graph's (l,) and (h,) indices of the maps it computes (default: all)


def input_names(session: Any) -> list[str]:
    """The feeds an onnxruntime session takes, in its order: what `pad(..., names=...)` must build for it."""
    return [i.name for i in session.get_inputs()]


def pad(
    sequences: Sequence[Sequence[int] | np.ndarray], pad_id: int, names: Sequence[str] = INPUT_NAMES,
    type_ids: Sequence[Sequence[int] | np.ndarray] | None = None, adapters: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """Token-id sequences -> the `names` feeds, each (B, T) int64, right-padded: input_ids with pad_id,
    attention_mask 1 over each sequence, token_type_ids from `type_ids` (a pair's 0s then 1s; all 0 when
    not given) and 0 over padding; adapter (B,): `adapters`, one index per sequence (all 0 when not given)."""
    unknown = sorted(set(names) - {*KNOWN_INPUTS, ADAPTER})
    if unknown:
        raise ValueError(f"unknown graph input(s) {', '.join(unknown)}; known: {', '.join((*KNOWN_INPUTS, ADAPTER))}")
    if adapters is not None and len(adapters) != len(sequences):
        raise ValueError(f"{len(adapters)} adapter indices for {len(sequences)} sequences")
    longest = max(len(s) for s in sequences)
    feeds = {
        "input_ids": np.full((len(sequences), longest), pad_id, dtype=np.int64),  # (B, T)
        "attention_mask": np.zeros((len(sequences), longest), dtype=np.int64),  # (B, T)
        TOKEN_TYPE_IDS: np.zeros((len(sequences), longest), dtype=np.int64),  # (B, T)
        ADAPTER: np.asarray(adapters if adapters is not None else [0] * len(sequences), dtype=np.int64),  # (B,)
    }
    for row, ids in enumerate(sequences):
        feeds["input_ids"][row, : len(ids)] = ids
        feeds["attention_mask"][row, : len(ids)] = 1
        if type_ids is not None:
            feeds[TOKEN_TYPE_IDS][row, : len(ids)] = type_ids[row]
    return {name: feeds[name] for name in names}


def selects(session: Any) -> bool:
    """Whether an attention graph's session takes the layers and heads to compute (module docstring)."""
    return set(SELECTION) <= {i.name for i in session.get_overridable_initializers()}


def selected(layers: Sequence[int], heads: Sequence[int]) -> dict[str, np.ndarray]:
    """The feeds choosing which maps an attention graph computes: (l,) and (h,) int64 indices."""
    return dict(zip(SELECTION, (np.asarray(layers, dtype=np.int64), np.asarray(heads, dtype=np.int64)), strict=True))
