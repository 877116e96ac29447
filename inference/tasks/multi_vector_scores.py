"""Multi-vector outputs, torch-free: a graph's per-token `multi_vectors` and `token_weights` turned into what the
references return (ColBERT's token vectors, bge-m3's colbert_vecs and lexical weights), and late-interaction
scores over them. The bundle's bundle.multi_vector.MultiVectorSpec says how; no HTTP here.

Shape letters: T sequence, M multi-vector width, N kept tokens of an input, Q query tokens, K document tokens.

    token_vectors     one input's vectors: its kept positions (real tokens, or as the caller says: an expanded
                      query keeps its expansion tokens), the first dropped when spec.skip_first_token (bge-m3
                      leaves out CLS), a document's skip_ids dropped, each L2-normalised when spec.normalize
    lexical_weights   one input's token id -> the largest weight of that id over its real tokens, drop ids
                      dropped, only weights > 0 (FlagEmbedding's _process_token_weights)
    lexical_score     the sum over shared ids of the two weights' product (compute_lexical_matching_score)
    maxsim            per query token its best similarity over the document's tokens, summed or averaged
                      (spec.reduction); explain gives each query token's best document token and its similarity
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bundle.multi_vector import MultiVectorSpec

Reduction = Literal["sum", "mean"]
NORM_EPS = 1e-12  # torch.nn.functional.normalize's eps, as the references normalise


@dataclass(frozen=True)
class MaxSim:
    """A late-interaction score and why: per query token, its best document token and their similarity."""

    score: float
    best: np.ndarray  # (Q,) int64: the document token index each query token matches best
    similarity: np.ndarray  # (Q,) float32: that match's similarity (dot product of the vectors)


def token_vectors(vectors: np.ndarray, input_ids: np.ndarray, keep: np.ndarray, spec: MultiVectorSpec,
                  document: bool = False) -> np.ndarray:
    """(T, M) raw vectors of one input -> (N, M): the positions `keep` (T,) marks (its attention mask, or an expanded
    query's expansion positions too) in order, less the first when spec.skip_first_token, less a document's
    spec.skip_ids, normalised when spec.normalize."""
    chosen = np.asarray(vectors, dtype=np.float32)[kept_positions(input_ids, keep, spec, document)]  # (N, M)
    return normalize(chosen) if spec.normalize else chosen


def kept_positions(input_ids: np.ndarray, keep: np.ndarray, spec: MultiVectorSpec,
                   document: bool = False) -> np.ndarray:
    """(N,) the positions whose vectors token_vectors keeps, in order: those `keep` (T,) marks, less the first when
    spec.skip_first_token, less a document's spec.skip_ids."""
    kept = np.flatnonzero(np.asarray(keep).astype(bool))  # (N,) positions, in order
    if spec.skip_first_token:
        kept = kept[1:]
    if document and spec.skip_ids:
        kept = kept[~np.isin(np.asarray(input_ids)[kept], spec.skip_ids)]
    return kept


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Each row L2-normalised as torch's F.normalize does: divided by max(its norm, 1e-12)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)  # (N, 1)
    return (vectors / np.maximum(norms, NORM_EPS)).astype(np.float32)


def lexical_weights(weights: np.ndarray, input_ids: np.ndarray, attention_mask: np.ndarray,
                    drop_ids: Collection[int]) -> dict[int, float]:
    """(T,) token weights of one input -> token id -> the largest weight of that id over its real tokens, ids in
    drop_ids left out, only weights above 0; ids in order of first appearance, as FlagEmbedding builds them."""
    drop = set(drop_ids)
    out: dict[int, float] = {}
    for weight, token, real in zip(np.asarray(weights, dtype=np.float32).tolist(), np.asarray(input_ids).tolist(),
                                   np.asarray(attention_mask).tolist(), strict=True):
        if real and token not in drop and weight > out.get(token, 0.0):
            out[token] = weight
    return out


def lexical_score(a: dict[int, float], b: dict[int, float]) -> float:
    """The sum over the ids both hold of the product of their weights."""
    return float(sum(weight * b[token] for token, weight in a.items() if token in b))


def explain(query: np.ndarray, document: np.ndarray, reduction: Reduction = "sum") -> MaxSim:
    """(Q, M) query and (K, M) document vectors -> the MaxSim score (each query token's best similarity, summed or
    averaged over the query's tokens), with each query token's best document token and similarity."""
    if not len(query) or not len(document):
        raise ValueError(f"MaxSim needs at least one query and one document vector; got {len(query)} and "
                         f"{len(document)}")
    similarities = np.asarray(query, dtype=np.float32) @ np.asarray(document, dtype=np.float32).T  # (Q, K)
    best = similarities.argmax(axis=1)  # (Q,)
    chosen = similarities[np.arange(len(query)), best]  # (Q,)
    total = float(chosen.sum(dtype=np.float32))
    return MaxSim(total / len(query) if reduction == "mean" else total, best.astype(np.int64), chosen)


def maxsim(query: np.ndarray, document: np.ndarray, reduction: Reduction = "sum") -> float:
    """The MaxSim score of (Q, M) query and (K, M) document vectors (explain's score)."""
    return explain(query, document, reduction).score
