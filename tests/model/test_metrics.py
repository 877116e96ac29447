"""Metrics against values worked out by hand."""

from __future__ import annotations

import pytest

from model.training.metrics import accuracy, classification_report, confusion_matrix, macro_f1, per_class

TARGETS = [0, 0, 1, 1, 2, 2]
PREDICTIONS = [0, 1, 1, 1, 0, 2]
# confusion (rows true, columns predicted): [1 1 0] [0 2 0] [1 0 1]
# class 0: P 1/2 R 1/2 F1 1/2; class 1: P 2/3 R 1 F1 4/5; class 2: P 1 R 1/2 F1 2/3


def test_confusion_matrix_counts_true_by_predicted():
    assert confusion_matrix(TARGETS, PREDICTIONS, 3) == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]


def test_accuracy():
    assert accuracy(TARGETS, PREDICTIONS) == pytest.approx(4 / 6)


def test_per_class_precision_recall_f1():
    rows = per_class(confusion_matrix(TARGETS, PREDICTIONS, 3))
    expected = [(1 / 2, 1 / 2, 1 / 2, 2), (2 / 3, 1.0, 4 / 5, 2), (1.0, 1 / 2, 2 / 3, 2)]
    for row, (p, r, f1, support) in zip(rows, expected, strict=True):
        assert row == pytest.approx({"precision": p, "recall": r, "f1": f1, "support": support})


def test_macro_f1_is_unweighted_mean():
    assert macro_f1(confusion_matrix(TARGETS, PREDICTIONS, 3)) == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)


def test_never_predicted_class_scores_zero_not_nan():
    rows = per_class(confusion_matrix([0, 1], [0, 0], 2))
    assert rows[1] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert rows[0]["precision"] == pytest.approx(0.5)


def test_report_names_classes():
    report = classification_report(TARGETS, PREDICTIONS, ["a", "b", "c"])
    assert set(report["per_class"]) == {"a", "b", "c"}
    assert report["accuracy"] == pytest.approx(4 / 6)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="targets"):
        confusion_matrix([0, 1], [0], 2)
