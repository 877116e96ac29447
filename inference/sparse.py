"""Sparse vectors (SPLADE) from a masked-LM bundle: the graph's `sparse` output, the max over each input's
real tokens of log(1 + relu(masked-LM logits)), computed inside the graph (export.graphs) so the (B, T, V)
logits never leave it. Here only its nonzero entries are kept, in vocabulary order, or the `top_k` largest.

Shape letters: N inputs, V vocabulary, k nonzero entries.
"""

from __future__ import annotations

import numpy as np

from inference.graphs import SPARSE
from inference.limits import Inputs
from inference.results import SparseVector, SparseVectors
from inference.served import ServedModel
from inference.tokenize import Direction


async def embed_sparse(
    model: ServedModel, inputs: Inputs, *, truncate: bool | None = None, direction: Direction = "right",
    top_k: int | None = None,
) -> SparseVectors:
    """Per input, its nonzero vocabulary weights (the top_k largest when given), in vocabulary order."""
    model.require("sparse", "make sparse vectors (it is not a masked-LM bundle)")
    encoded, outputs = await model.run(inputs, [SPARSE], truncate, direction)
    vectors = [nonzero(o["sparse"], top_k) for o in outputs[SPARSE]]
    return SparseVectors(vectors, sum(e.length for e in encoded))


def nonzero(vector: np.ndarray, top_k: int | None = None) -> SparseVector:
    """(V,) weights -> the entries above 0 (the top_k largest, ties to the lower index), in index order."""
    indices = np.flatnonzero(vector > 0)  # (k,)
    if top_k is not None and len(indices) > top_k:
        order = np.argsort(-vector[indices], kind="stable")[:top_k]
        indices = np.sort(indices[order])
    return SparseVector(indices.astype(np.int64), vector[indices].astype(np.float32))


def dense(vector: SparseVector, size: int) -> np.ndarray:
    """The (V,) vector a sparse one stands for."""
    out = np.zeros(size, dtype=np.float32)
    out[vector.indices] = vector.values
    return out
