"""Numpy post-processing of graph outputs: normalisation, dimensions, softmax and sigmoid, attention views.

Shape letters: N inputs, D hidden, C labels, L layers, H heads, n real tokens of one input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

ScoreFunction = Literal["softmax", "sigmoid", "none"]


def stacked(outputs: Sequence[dict[str, np.ndarray]], name: str) -> np.ndarray:
    """One output of N inputs' results, (N, ...)."""
    return np.stack([o[name] for o in outputs])


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)  # (N, 1)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def embeddings(vectors: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
    """(N, D) pooled vectors -> (N, dimensions): truncated first, then renormalised (Matryoshka style)."""
    if dimensions is not None:
        return l2_normalize(vectors[:, :dimensions])
    return l2_normalize(vectors) if normalize else vectors.astype(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (N, C)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * logits))  # 1 / (1 + e^-x), without overflow for large |x|


def default_function(labels: int) -> ScoreFunction:
    """Scores of a model's logits unless the caller says otherwise: softmax over two or more labels, sigmoid of
    a single one (a softmax over one logit is always 1.0), as sentence-transformers' CrossEncoder does."""
    return "sigmoid" if labels == 1 else "softmax"


def scores(logits: np.ndarray, function: ScoreFunction | None = None) -> np.ndarray:
    """(N, C) logits -> scores: softmax over labels, sigmoid per label, or the logits themselves; None: the
    default for C labels (`default_function`)."""
    function = function or default_function(logits.shape[-1])
    if function == "softmax":
        return softmax(logits)
    return sigmoid(logits) if function == "sigmoid" else logits


def select(attentions: np.ndarray, layers: Sequence[int] | None, heads: Sequence[int] | None) -> np.ndarray:
    """(L, H, n, n) -> (l, h, n, n) for the chosen layer and head indices (all when None)."""
    if layers is not None:
        attentions = attentions[list(layers)]
    if heads is not None:
        attentions = attentions[:, list(heads)]
    return attentions


def rollout(attentions: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): (l, h, n, n) -> (n, n).

    Per layer: average the heads, add the identity for the residual path, renormalise the rows;
    then multiply the layers through, first layer on the right.
    """
    n = attentions.shape[-1]
    result = np.eye(n, dtype=np.float64)  # (n, n)
    for layer in attentions.astype(np.float64):
        mixed = layer.mean(axis=0) + np.eye(n)  # (n, n)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        result = mixed @ result
    return result.astype(np.float32)


def aggregate(attentions: np.ndarray, how: str) -> np.ndarray:
    """none (l, h, n, n); mean / max over heads (l, n, n); rollout across the layers (n, n)."""
    if how == "mean":
        return attentions.mean(axis=1)
    if how == "max":
        return attentions.max(axis=1)
    if how == "rollout":
        return rollout(attentions)
    return attentions


def aggregated_shape(layers: int, heads: int, n: int, how: str) -> tuple[int, ...]:
    if how == "rollout":
        return (n, n)
    if how in ("mean", "max"):
        return (layers, n, n)
    return (layers, heads, n, n)
