"""Embeddings in fewer bits (Cohere's `embedding_types`), as sentence-transformers' `quantize_embeddings` defines them.

Shape letters: N vectors, E their width.

    int8, uint8      each dimension's calibration range [lo, hi] in 255 equal steps: floor((v - lo) / step),
                     clipped to 0..255 (uint8), minus 128 (int8); a dimension with lo == hi takes steps of 1
    binary, ubinary  one bit a dimension, set where v > 0, eight to a byte (numpy.packbits: the first dimension is
                     the high bit; a width that is not a multiple of 8 is padded with zero bits): as uint8
                     (ubinary), or minus 128 as int8 (binary)

The int8 ranges are not the request's own minimum and maximum (sentence-transformers' default without calibration):
then the same text would get other codes beside other texts. They come from a fixed calibration set instead, as
sentence-transformers' `calibration_embeddings`: the model's embeddings of CALIBRATION_TEXTS, each dimension's min
and max (inference.tasks.quantized computes them once per model, adapter and width). A value outside its range
clips to the end code.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Precision = Literal["int8", "uint8", "binary", "ubinary"]
PRECISIONS: tuple[Precision, ...] = ("int8", "uint8", "binary", "ubinary")

# Short and long, questions and statements, several languages and registers, prose, code and numbers: what an
# embedding server is sent. Their embeddings' per-dimension extremes are the int8 ranges (module docstring).
CALIBRATION_TEXTS: tuple[str, ...] = (
    "What is the capital of Australia?",
    "Canberra is the capital city of Australia, chosen as a compromise between Sydney and Melbourne.",
    "how do I reset my password",
    "To reset your password, open Settings, choose Security and follow the link sent to your e-mail address.",
    "The patient presented with a mild fever, a dry cough and fatigue lasting three days.",
    "Quarterly revenue rose 12% to $4.3 billion, driven by strong demand for cloud services.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 10;",
    "A warm and funny film with a terrific cast.",
    "The plot makes no sense at all, and the ending drags on for far too long.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "best hiking trails near Lake Tahoe in autumn",
    "The court ruled that the contract was void because one party had not been informed of a material fact.",
    "Preheat the oven to 200 °C, then roast the vegetables for 25 minutes, turning once.",
    "Der Zug nach Berlin hat heute zwanzig Minuten Verspätung.",
    "Le musée est fermé le lundi et ouvre à neuf heures les autres jours.",
    "¿Dónde está la estación de tren más cercana?",
    "東京は日本の首都であり、世界最大の都市圏の一つです。",
    "机器学习是人工智能的一个分支。",
    "Москва — столица России.",
    "Error: connection refused (ECONNREFUSED) while connecting to 127.0.0.1:5432",
    "2024-03-15 14:22:07 INFO worker-3 processed 1,204 jobs in 38.2 s",
    "Table 3: accuracy 91.2, precision 88.7, recall 90.1, F1 89.4",
    "The mitochondria is the powerhouse of the cell.",
    "Shakespeare wrote Hamlet around the year 1600.",
    "cheap flights from London to New York in December",
    "Our refund policy allows returns within 30 days of purchase with the original receipt.",
    "The algorithm runs in O(n log n) time and uses O(n) additional memory.",
    "yes",
    "no",
    "ok thanks!! :)",
    "In 1969, Apollo 11 landed the first humans on the Moon, and Neil Armstrong stepped onto its surface.",
)


def calibration_ranges(vectors: np.ndarray) -> np.ndarray:
    """(2, E) float32: each dimension's minimum and maximum over the calibration vectors (N, E)."""
    return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)


def quantize(vectors: np.ndarray, precision: Precision, ranges: np.ndarray | None = None) -> np.ndarray:
    """`vectors` (N, E) float32 in `precision` (module docstring): (N, E) int8/uint8 codes, or (N, ceil(E / 8))
    packed bits; `ranges` (2, E), for int8 and uint8 only."""
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)  # (N, ceil(E / 8)) uint8
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    if ranges is None:
        raise ValueError(f"{precision} needs calibration ranges")
    starts = ranges[0].astype(np.float32)
    steps = (ranges[1].astype(np.float32) - starts) / 255
    steps = np.where(steps == 0, 1, steps)
    codes = np.clip(np.floor((vectors - starts) / steps), 0, 255)  # (N, E)
    return codes.astype(np.uint8) if precision == "uint8" else (codes - 128).astype(np.int8)
