"""The graphs' inputs: every graph in a bundle takes right-padded token ids and their attention mask.

Shape letters: B batch, T the longest sequence in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

INPUT_NAMES = ("input_ids", "attention_mask")


def pad(sequences: Sequence[Sequence[int] | np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    """Token-id sequences -> {input_ids, attention_mask}, both (B, T) int64, right-padded with pad_id."""
    longest = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)  # (B, T)
    attention_mask = np.zeros((len(sequences), longest), dtype=np.int64)  # (B, T)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}
