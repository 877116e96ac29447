"""The core's typed results as what goes on the wire: values orjson writes straight from numpy, base64 of
little-endian floats, and the JSON shapes of windows, labels, tokens and attention maps.

Shape letters: N inputs, K windows, D' embedding width, C labels, n real tokens of one input.
"""

from __future__ import annotations

import binascii
from typing import Any

import numpy as np

from inference.results import (
    AttentionMap,
    Embeddings,
    Entity,
    LabelScore,
    Ranking,
    Scores,
    Span,
    SparseVector,
    Token,
    grouped,
)


def base64_floats(values: np.ndarray, dtype: str = "float32") -> str:
    """Little-endian bytes of `dtype` (float32, or float16), base64; one cast into a contiguous buffer,
    encoded straight from it (no `tobytes` copy). OpenAI's encoding_format=base64 is float32."""
    buffer = np.ascontiguousarray(values, dtype="<f2" if dtype == "float16" else "<f4")
    return binascii.b2a_base64(buffer.data.cast("B"), newline=False).decode("ascii")


def labels(ranked: list[LabelScore]) -> list[dict[str, Any]]:
    return [{"label": s.label, "score": s.score} for s in ranked]


def span(window: Span) -> dict[str, int]:
    return {"start": window.start, "stop": window.stop, "tokens": window.tokens}


def embedding_windows(result: Embeddings) -> list[list[dict[str, Any]]]:
    """Per input, each window's span and embedding (chunking=windows)."""
    assert result.spans is not None
    return [[{**span(w), "embedding": row} for w, row in windows] for windows in grouped(result.vectors, result.spans)]


def score_windows(result: Scores, top_k: int | None) -> list[list[dict[str, Any]]]:
    """Per input, each window's span and its labels and scores, best first (chunking=windows)."""
    assert result.spans is not None
    ranked = result.ranked(top_k)
    return [[{**span(w), "scores": labels(r)} for w, r in windows] for windows in grouped(ranked, result.spans)]


def tokens(items: list[Token]) -> list[dict[str, Any]]:
    return [{"id": t.id, "text": t.text, "start": t.start, "stop": t.stop, "special": t.special} for t in items]


def attention_item(item: AttentionMap, encoding: str, dtype: str) -> dict[str, Any]:
    """One input's tokens and maps: the float32 array itself (orjson writes nested lists), or base64."""
    values: object = np.ascontiguousarray(item.values, dtype=np.float32) if encoding == "float" else \
        base64_floats(item.values, dtype)
    return {"tokens": tokens(item.tokens), "shape": list(item.values.shape), "attention": values}


def rank_extras(ranking: Ranking, index: int) -> dict[str, Any]:
    """A ranked document's best window (chunking max) and explanation (explain), where asked for."""
    extras: dict[str, Any] = {}
    if ranking.spans is not None:
        extras["window"] = span(ranking.spans[index])
    if ranking.explanations is not None:
        extras["explanation"] = [{"start": h.start, "stop": h.stop, "weight": h.weight}
                                 for h in ranking.explanations[index]]
    if ranking.matches is not None:
        extras["explanation"] = [{"query_start": m.query_start, "query_stop": m.query_stop, "start": m.start,
                                  "stop": m.stop, "similarity": m.similarity} for m in ranking.matches[index]]
    return extras


def sparse(vector: SparseVector) -> list[dict[str, Any]]:
    """TEI's sparse vector: its nonzero entries as {index, value}, in index order."""
    return [{"index": i, "value": v} for i, v in zip(vector.indices.tolist(), vector.values.tolist(), strict=True)]


def entity(item: Entity, grouped_tokens: bool) -> dict[str, Any]:
    """transformers' token-classification pipeline's keys: entity (with index) or entity_group."""
    if grouped_tokens:
        return {"entity_group": item.label, "score": item.score, "word": item.word, "start": item.start,
                "end": item.end}
    return {"entity": item.label, "score": item.score, "index": item.index, "word": item.word,
            "start": item.start, "end": item.end}
