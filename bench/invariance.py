"""Batch invariance (bundle.invariance) of the session the bench and the server run (same options, same
threads per run): texts of mixed lengths, each run alone and in one batch with all the others.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer

from bench.texts import make_texts
from bundle import invariance

LENGTHS = (4, 9, 16, 31, 64, 128)  # tokens per text, [CLS] and [SEP] included


def texts(tokenizer: Tokenizer, max_length: int) -> list[list[int]]:
    """Token ids of texts of mixed lengths (two of each length), clipped to `max_length`."""
    return [e.ids for n in LENGTHS for e in tokenizer.encode_batch(make_texts(tokenizer, min(n, max_length), 2, n))]


def batch_max_abs_diff(session: Any, sequences: list[list[int]], pad_id: int = 0) -> float:
    """Largest |alone - in one batch with all the others| over `sequences` (bundle.invariance)."""
    return invariance.batch_max_abs_diff(session, [sequences], pad_id)
