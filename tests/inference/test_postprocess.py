"""Numpy post-processing (inference.postprocess), typed results and the answer-size estimates."""

from __future__ import annotations

import numpy as np
import orjson

from inference import postprocess
from inference.limits import estimated_bytes
from inference.results import Scores, Span, grouped
from service.wire import base64_floats


def test_embeddings_dimensions_and_softmax():
    vectors = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    np.testing.assert_allclose(postprocess.embeddings(vectors, True, None), [[3 / 13, 4 / 13, 12 / 13]], rtol=1e-6)
    np.testing.assert_allclose(postprocess.embeddings(vectors, False, 2), [[0.6, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(postprocess.softmax(np.array([[0.0, np.log(3)]])), [[0.25, 0.75]])
    np.testing.assert_allclose(postprocess.sigmoid(np.array([-800.0, 0.0, 800.0])), [0.0, 0.5, 1.0])


def test_default_scores_are_softmax_over_labels_and_sigmoid_of_one_logit():
    """A softmax over one logit is 1.0 whatever the model says: a one-label model (a cross-encoder) is scored
    by the sigmoid of its logit, as sentence-transformers' CrossEncoder scores it."""
    one, three = np.array([[-2.0], [0.0], [3.0]]), np.array([[1.0, 2.0, 3.0]])
    assert postprocess.default_function(1) == "sigmoid" and postprocess.default_function(3) == "softmax"
    np.testing.assert_allclose(postprocess.scores(one), 1 / (1 + np.exp(-one)))
    np.testing.assert_allclose(postprocess.scores(three), postprocess.softmax(three))
    np.testing.assert_allclose(postprocess.scores(one, "softmax"), np.ones_like(one))  # what asking for it gives


def test_ranked_labels_best_first_ties_in_label_order():
    ranked = Scores(np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0]]), ["a", "b", "c"]).ranked(2)
    assert [[s.label for s in row] for row in ranked] == [["b", "c"], ["a", "b"]]
    assert ranked[0][0].score == np.float64(0.7)


def test_grouped_gives_each_input_its_windows_rows():
    spans = [[Span(0, 5, 3)], [Span(0, 9, 4), Span(6, 12, 4)]]
    rows = ["r0", "r1", "r2"]
    assert list(grouped(rows, spans)) == [[(spans[0][0], "r0")], [(spans[1][0], "r1"), (spans[1][1], "r2")]]


def test_rollout_of_identity_attention_is_identity_and_rows_sum_to_one():
    eye = np.broadcast_to(np.eye(4), (3, 2, 4, 4))  # (l, h, n, n)
    np.testing.assert_allclose(postprocess.rollout(eye), np.eye(4), atol=1e-6)
    rng = np.random.default_rng(0)
    maps = rng.random((3, 2, 5, 5))
    maps /= maps.sum(-1, keepdims=True)
    np.testing.assert_allclose(postprocess.rollout(maps).sum(-1), 1, atol=1e-5)


def test_attention_size_estimate_bounds_the_real_bytes():
    values = np.random.default_rng(0).random((2, 2, 9, 9)).astype(np.float32)
    assert len(orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)) <= estimated_bytes(values.size, "float",
                                                                                            "float32")
    assert len(base64_floats(values, "float16")) == estimated_bytes(values.size, "base64", "float16")
    assert len(base64_floats(values)) == estimated_bytes(values.size, "base64", "float32")
