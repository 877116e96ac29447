"""Embeddings in the precisions of inference.quantize, beside the floats: the int8 ranges each model is quantised
with, computed once from its embeddings of the calibration texts and kept.

Shape letters: N inputs, E the vectors' width (after `dimensions`).
"""

from __future__ import annotations

import numpy as np

from inference.quantize import CALIBRATION_TEXTS, Precision, calibration_ranges, quantize
from inference.served import ServedModel
from inference.tasks.embed import embed

# (model fingerprint, adapter, dimensions, normalize) -> (2, E) ranges: the same for every request, so a text's
# codes do not depend on what else was sent
_RANGES: dict[tuple[str, str | None, int | None, bool], np.ndarray] = {}


async def int8_ranges(model: ServedModel, dimensions: int | None, normalize: bool) -> np.ndarray:
    """(2, E): each dimension's min and max over the model's embeddings of CALIBRATION_TEXTS, embedded as documents
    (input_type document: the model's document prompt when it has one), cut to `dimensions` and normalised as the
    request's are; computed on first use (one batch through the model's queue) and kept."""
    key = (model.fingerprint, model.adapter, dimensions, normalize)
    if key not in _RANGES:
        calibration = await embed(model, list(CALIBRATION_TEXTS), normalize=normalize, dimensions=dimensions,
                                  input_type="document", truncate=True)
        _RANGES[key] = calibration_ranges(np.asarray(calibration.vectors, dtype=np.float32))
    return _RANGES[key]


async def quantized(model: ServedModel, vectors: np.ndarray, precision: Precision, dimensions: int | None,
                    normalize: bool) -> np.ndarray:
    """`vectors` (N, E) in `precision`, with the model's int8 ranges where the precision needs them."""
    ranges = await int8_ranges(model, dimensions, normalize) if precision in ("int8", "uint8") else None
    return quantize(np.asarray(vectors, dtype=np.float32), precision, ranges)
