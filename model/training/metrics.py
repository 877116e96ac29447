"""Classification metrics from integer predictions and targets: plain Python, no torch needed.

A class that is never predicted has precision 0 (not NaN), one with no examples has recall 0, and
F1 is 0 when precision + recall is 0, as scikit-learn does with zero_division=0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def confusion_matrix(targets: Sequence[int], predictions: Sequence[int], num_classes: int) -> list[list[int]]:
    """matrix[true][predicted] counts."""
    if len(targets) != len(predictions):
        raise ValueError(f"{len(targets)} targets but {len(predictions)} predictions")
    matrix = [[0] * num_classes for _ in range(num_classes)]
    for t, p in zip(targets, predictions, strict=True):
        matrix[t][p] += 1
    return matrix


def accuracy(targets: Sequence[int], predictions: Sequence[int]) -> float:
    if not targets:
        raise ValueError("accuracy of an empty set is undefined")
    return sum(t == p for t, p in zip(targets, predictions, strict=True)) / len(targets)


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def per_class(matrix: list[list[int]]) -> list[dict[str, float]]:
    """Precision, recall, F1 and support of each class from a confusion matrix."""
    rows = []
    for c in range(len(matrix)):
        true_pos = matrix[c][c]
        predicted = sum(row[c] for row in matrix)
        support = sum(matrix[c])
        precision, recall = _ratio(true_pos, predicted), _ratio(true_pos, support)
        f1 = _ratio(2 * true_pos, predicted + support)  # = 2PR / (P + R)
        rows.append({"precision": precision, "recall": recall, "f1": f1, "support": support})
    return rows


def macro_f1(matrix: list[list[int]]) -> float:
    """Unweighted mean of the per-class F1 scores."""
    rows = per_class(matrix)
    return sum(r["f1"] for r in rows) / len(rows)


def classification_report(
    targets: Sequence[int], predictions: Sequence[int], label_names: Sequence[str],
) -> dict[str, Any]:
    """Everything metrics.json records for one evaluation."""
    matrix = confusion_matrix(targets, predictions, len(label_names))
    return {
        "accuracy": accuracy(targets, predictions),
        "macro_f1": macro_f1(matrix),
        "per_class": dict(zip(label_names, per_class(matrix), strict=True)),
        "confusion_matrix": matrix,
    }
