"""Batch invariance of a graph: does a text's answer depend on its batch partners and their padding?

The serving batcher puts a request's inputs into whatever batch forms, so a text's outputs should not move
with the batch. Each text is run alone (B = 1, no padding), in each batch given (mixed lengths, padded to
the longest), and in one batch of all of them; the figure is the largest absolute difference of its
embeddings and logits between the runs. fp32 graphs stay at float rounding or below; a graph whose
activation scales are computed per batch (dynamic int8) moves by 1e-3 and more. Export records the figure
of each graph in the manifest (`measured`); the bench measures the session it serves with.

Shape letters: B batch, D hidden, C labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bundle.feeds import input_names, pad

COMPARED = ("embeddings", "logits")


def batch_max_abs_diff(session: Any, batches: Sequence[Sequence[Sequence[int]]], pad_id: int = 0) -> float:
    """Largest |alone - in batch| over the texts of `batches` (token-id sequences), embeddings and logits:
    each batch as given, then all texts in one batch."""
    names = [o.name for o in session.get_outputs() if o.name in COMPARED]
    texts = [ids for batch in batches for ids in batch]
    alone = [_run(session, names, [ids], pad_id) for ids in texts]
    starts = np.cumsum([0] + [len(b) for b in batches])
    groups = [*zip(starts, batches, strict=False), (0, texts)] if len(batches) > 1 else [(0, texts)]
    worst = 0.0
    for start, group in groups:
        together = _run(session, names, group, pad_id)  # each (B, D) or (B, C)
        for row in range(len(group)):
            for name in names:
                diff = np.abs(together[name][row] - alone[start + row][name][0])
                worst = max(worst, float(diff.max()))
    return worst


def _run(session: Any, names: list[str], sequences: Sequence[Sequence[int]], pad_id: int) -> dict[str, np.ndarray]:
    return dict(zip(names, session.run(names, pad(sequences, pad_id, input_names(session))), strict=True))
