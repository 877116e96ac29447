"""Batch invariance of a graph: does a text's answer depend on its batch partners and their padding?

The serving batcher puts a request's inputs into whatever batch forms, so a text's outputs should not move with the
batch. Each text is run alone (B = 1, no padding), in each batch given (mixed lengths, padded to the longest), and
in one batch of all of them (or of the shortest that fit a token budget: together()); the figure is the largest
absolute difference of its embeddings and logits between the runs. fp32 graphs stay at float rounding or below; a
graph whose activation scales are computed per batch (dynamic int8) moves by 1e-3 and more. Export records the
figure of each graph in the manifest (`measured`); the bench measures the session it serves with.

Shape letters: B batch, D hidden, C labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bundle.feeds import PIXEL_VALUES, input_names, pad

COMPARED = ("embeddings", "logits")


def batch_max_abs_diff(session: Any, batches: Sequence[Sequence[Sequence[int]]], pad_id: int = 0,
                       together_tokens: int | None = None) -> float:
    """Largest |alone - in batch| over the texts of `batches` (token-id sequences), embeddings and logits: each batch
    as given, then one batch of all of them, or, with `together_tokens`, of as many as fit in that many padded
    tokens (B x the longest), shortest first (together())."""
    names = [o.name for o in session.get_outputs() if o.name in COMPARED]
    texts = [ids for batch in batches for ids in batch]
    alone = [_run(session, names, [ids], pad_id) for ids in texts]
    starts = np.cumsum([0] + [len(b) for b in batches])
    given = [list(range(start, start + len(b))) for start, b in zip(starts, batches, strict=False)]
    groups = [*(given if len(batches) > 1 else []), together(texts, together_tokens)]
    worst = 0.0
    for group in groups:
        joint = _run(session, names, [texts[i] for i in group], pad_id)  # each (B, D) or (B, C)
        for row, index in enumerate(group):
            for name in names:
                worst = max(worst, float(np.abs(joint[name][row] - alone[index][name][0]).max()))
    return worst


def image_max_abs_diff(session: Any, batches: Sequence[Sequence[np.ndarray]]) -> float:
    """batch_max_abs_diff for an image graph: each (C, H, W) image of `batches` alone, in its batch and in one batch
    of all of them (images share one size: no padding, only the partners change)."""
    names = [o.name for o in session.get_outputs() if o.name in COMPARED]
    images = [image for batch in batches for image in batch]
    alone = [_run_images(session, names, [image]) for image in images]
    starts = np.cumsum([0] + [len(b) for b in batches])
    groups = [list(range(start, start + len(b))) for start, b in zip(starts, batches, strict=False)]
    worst = 0.0
    for group in [*groups, list(range(len(images)))]:
        joint = _run_images(session, names, [images[i] for i in group])  # each (B, D) or (B, C)
        for row, index in enumerate(group):
            for name in names:
                worst = max(worst, float(np.abs(joint[name][row] - alone[index][name][0]).max()))
    return worst


def _run_images(session: Any, names: list[str], images: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(names, session.run(names, {PIXEL_VALUES: np.stack(images)}), strict=True))


def together(texts: Sequence[Sequence[int]], tokens: int | None) -> list[int]:
    """The indices of the texts run in one batch: all of them, or the shortest ones (at least two) whose batch,
    padded to its longest, holds at most `tokens`: a 0.6B model's 17 parity texts padded to 600 tokens take longer
    than everything else the export measures, while the given batches already pad a short text beside a long one."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    if tokens is None:
        return list(range(len(texts)))
    count = max(n for n in range(1, len(order) + 1) if n <= 2 or n * len(texts[order[n - 1]]) <= tokens)
    return sorted(order[:count])


def _run(session: Any, names: list[str], sequences: Sequence[Sequence[int]], pad_id: int) -> dict[str, np.ndarray]:
    return dict(zip(names, session.run(names, pad(sequences, pad_id, input_names(session))), strict=True))
