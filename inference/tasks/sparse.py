"""Sparse vectors (SPLADE) from a masked-LM bundle: the graph's `sparse` output, the max over each input's
real tokens of log(1 + relu(masked-LM logits)), computed inside the graph (export.graphs) so the (B, T, V)
logits never leave it. Here only its nonzero entries are kept, in vocabulary order, or the `top_k` largest.
A multi-vector model with token weights (bge-m3's sparse_linear) gives its lexical weights the same way: each
id's largest weight over the input's tokens, its special tokens dropped (inference.tasks.multi_vector_scores).

Shape letters: N inputs, V vocabulary, k nonzero entries.
"""

from __future__ import annotations

import numpy as np

from inference.limits import Inputs
from inference.results import SparseVector, SparseVectors
from inference.runtime.graphs import MULTI, SPARSE
from inference.runtime.tokenize import Direction
from inference.served import ServedModel
from inference.tasks import multi_vector_scores


async def embed_sparse(
    model: ServedModel, inputs: Inputs, *, truncate: bool | None = None, direction: Direction = "right",
    top_k: int | None = None,
) -> SparseVectors:
    """Per input, its nonzero vocabulary weights (the top_k largest when given), in vocabulary order: SPLADE's
    vector, or a multi-vector model's lexical weights (bge-m3's: each id's largest token weight)."""
    model.require("sparse", "make sparse vectors (it is not a masked-LM bundle and has no token weights)")
    if "token_weights" in model.multi_outputs:
        encoded, outputs = await model.run(inputs, [MULTI], truncate, direction)
        drop = model.bundle.manifest.multi_vector.sparse_drop_ids  # type: ignore[union-attr]  # multi-vector
        vectors = [lexical(o["token_weights"], e.ids, drop, top_k) for o, e in zip(outputs[MULTI], encoded,
                                                                                   strict=True)]
        return SparseVectors(vectors, sum(e.length for e in encoded))
    encoded, outputs = await model.run(inputs, [SPARSE], truncate, direction)
    vectors = [nonzero(o["sparse"], top_k) for o in outputs[SPARSE]]
    return SparseVectors(vectors, sum(e.length for e in encoded))


def lexical(weights: np.ndarray, ids: np.ndarray, drop_ids: list[int], top_k: int | None = None) -> SparseVector:
    """(n,) token weights of one input's real tokens -> its lexical weights (inference.tasks.multi_vector_scores) as a
    sparse
    vector: ids ascending, the top_k largest when given."""
    found = multi_vector_scores.lexical_weights(weights, ids, np.ones_like(ids), drop_ids)
    indices = np.asarray(sorted(found), dtype=np.int64)  # (k,)
    values = np.asarray([found[i] for i in indices.tolist()], dtype=np.float32)  # (k,)
    if top_k is not None and len(indices) > top_k:
        keep = np.sort(np.argsort(-values, kind="stable")[:top_k])
        indices, values = indices[keep], values[keep]
    return SparseVector(indices, values)


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
