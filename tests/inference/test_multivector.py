"""inference/tasks/multi_vector_scores.py on hand-made arrays: which positions a token_vectors call keeps (real tokens
or the
caller's, the first skipped, a document's skip ids dropped), the per-id maximum of lexical_weights, and MaxSim's
explain form. Equality with the references is tests/model/test_bge_m3.py's and tests/export/test_bge_m3.py's."""

from __future__ import annotations

import numpy as np
import pytest

from bundle.multi_vector import MultiVectorSpec
from inference.tasks import multi_vector_scores

IDS = np.array([0, 7, 9, 7, 2, 1, 1])  # <s> a b a </s> <pad> <pad>
MASK = np.array([1, 1, 1, 1, 1, 0, 0])
VECTORS = np.arange(7 * 2, dtype=np.float32).reshape(7, 2) + 1  # (T, M): row i is [2i + 1, 2i + 2]


def rows(vectors: np.ndarray) -> list[int]:
    return [int(v[0] - 1) // 2 for v in vectors]


def test_real_tokens_kept_first_skipped_and_documents_skip_ids_dropped() -> None:
    spec = MultiVectorSpec(size=2, normalize=False, skip_first_token=True, skip_ids=[9])
    assert rows(multi_vector_scores.token_vectors(VECTORS, IDS, MASK, spec)) == [1, 2, 3, 4]  # a query keeps id 9
    assert rows(multi_vector_scores.token_vectors(VECTORS, IDS, MASK, spec, document=True)) == [1, 3, 4]
    expanded, whole = np.ones(7, dtype=np.int64), spec.model_copy(update={"skip_first_token": False})
    vectors = multi_vector_scores.token_vectors(VECTORS, IDS, expanded, whole)
    assert rows(vectors) == list(range(7))  # the caller's positions


def test_vectors_normalised_as_torch_does() -> None:
    vectors = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    got = multi_vector_scores.token_vectors(vectors, np.array([5, 6]), np.array([1, 1]), MultiVectorSpec(size=2))
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.0, 0.0]])  # a zero vector stays zero (eps), never NaN


def test_lexical_weights_keep_each_ids_largest_positive_weight() -> None:
    weights = np.array([0.9, 0.2, 0.0, 0.5, 0.8, 0.7, 0.7], dtype=np.float32)
    got = multi_vector_scores.lexical_weights(weights, IDS, MASK, drop_ids=[0, 1, 2])
    assert got == {7: pytest.approx(0.5)}  # id 9's weight 0 is left out, <s> </s> and padding dropped
    assert multi_vector_scores.lexical_score(got, {7: 2.0, 11: 1.0}) == pytest.approx(1.0)


def test_maxsim_needs_vectors_on_both_sides() -> None:
    with pytest.raises(ValueError, match="at least one"):
        multi_vector_scores.maxsim(np.zeros((0, 2), np.float32), np.ones((3, 2), np.float32))
