"""Batch invariance of a fast graph as the service opens it: does a text's answer depend on its batch?

The batcher puts a request's inputs into whatever batch forms, so a text's vector should not depend on
its batch partners or on the padding they bring. Each text is run alone (B = 1, no padding) and in one
batch with all the others (mixed lengths, padded to the longest); the figure is the largest absolute
difference of its embeddings and logits between the two. fp32 graphs stay at float rounding; a graph
whose activation scales are computed per batch (dynamic int8) moves by far more.

Export measures the same property of each graph for the manifest; this is the figure of the session the
bench and the service run (same options, same threads per run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench.texts import make_texts
from bundle.feeds import pad

LENGTHS = (4, 9, 16, 31, 64, 128)  # tokens per text, [CLS] and [SEP] included
_COMPARED = ("embeddings", "logits")


def texts(tokenizer: Tokenizer, max_length: int) -> list[list[int]]:
    """Token ids of texts of mixed lengths (two of each length), clipped to `max_length`."""
    return [e.ids for n in LENGTHS for e in tokenizer.encode_batch(make_texts(tokenizer, min(n, max_length), 2, n))]


def batch_max_abs_diff(session: Any, sequences: list[list[int]], pad_id: int = 0) -> float:
    """Largest |alone - in one batch| over `sequences` and the graph's embeddings and logits."""
    names = [o.name for o in session.get_outputs() if o.name in _COMPARED]
    together = session.run(names, pad(sequences, pad_id))  # each (B, D) or (B, C)
    worst = 0.0
    for row, ids in enumerate(sequences):
        alone = session.run(names, pad([ids], pad_id))  # each (1, D) or (1, C)
        for batched, single in zip(together, alone, strict=True):
            worst = max(worst, float(np.abs(batched[row] - single[0]).max()))
    return worst
