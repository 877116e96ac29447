"""Static int8: activation scales fixed at export from calibration texts, SmoothQuant, sensitive MatMuls in fp32.

Shape letters: B batch, T sequence, C labels, D hidden.

The recipe (measured in docs/int8.md):
1. onnxruntime's transformer optimiser without attention fusion (export.variants.optimize): LayerNorm and
   GELU fused, q, k and v kept as separate MatMuls the quantiser can see.
2. SmoothQuant (export.smoothing): the activation outliers move into the weights.
3. quantize_static, QDQ form, every MatMul with a constant weight: activations uint8 with ONE scale per
   tensor fixed from the calibration texts (MinMax, each text run alone so padding never widens a range),
   weights int8 symmetric per output column; MatMul outputs stay fp32, so onnxruntime fuses each
   DequantizeLinear -> MatMul into MatMulIntegerToFloat (U8S8, the VNNI kernel) when it loads the graph.
4. Sensitivity: each group of MatMuls sharing an input is quantised alone and its error on the calibration
   texts measured; the most sensitive groups are left in fp32, as few as possible: k = 0, 1, 2, ... until
   the graph passes its gate (the caller's `passes`).

Batch invariance by construction: with constant scales a token's int8 activations depend on that token
alone, integer products are exact, and the fp32 parts are the fp32 graph's; only dynamic quantisation's
per-batch scales made a vector depend on its batch partners.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from bundle.session import open_session
from export import onnxfiles
from export.parity import ParityError
from export.references import Batch
from export.smoothing import smooth
from export.variants import optimize
from model.config import EncoderConfig

log = logging.getLogger(__name__)

# How many of the most sensitive MatMul groups to leave in fp32, tried in this order.
KEEP_FP32_STEPS = (0, 1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24)
Feeds = list[dict[str, np.ndarray]]


class _Reader(CalibrationDataReader):
    def __init__(self, feeds: Feeds) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def build(
    fp32: Path, dst: Path, config: EncoderConfig, feeds: Feeds, reference: list[Batch],
    passes: Callable[[Path], dict[str, float]],
) -> dict[str, float]:
    """The static int8 graph of `fp32` at `dst` with the fewest fp32 groups that `passes` (which returns the
    parity figures or raises ParityError); `feeds` are the calibration inputs, `reference` their eager outputs
    in batches. Returns the figures plus how many MatMuls are int8 and how many groups stayed fp32."""
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".int8-") as work:
        smoothed, cache = Path(work) / "smoothed.onnx", Path(work) / "calibration.json"
        optimize(fp32, Path(work) / "optimized.onnx", config, fuse_attention=False)
        groups = smooth(Path(work) / "optimized.onnx", smoothed, feeds)
        order = sensitivity_order(smoothed, groups, feeds, cache, reference)
        return _fewest_fp32(smoothed, dst, groups, order, feeds, cache, passes)


def _fewest_fp32(
    smoothed: Path, dst: Path, groups: list[list[str]], order: list[int], feeds: Feeds, cache: Path,
    passes: Callable[[Path], dict[str, float]],
) -> dict[str, float]:
    error: ParityError | None = None
    everything = [n for g in groups for n in g]
    for keep in (k for k in KEEP_FP32_STEPS if k < len(groups)):
        kept = [n for i in order[:keep] for n in groups[i]]
        count = quantize(smoothed, dst, everything, kept, feeds, cache)
        try:
            figures = passes(dst)
        except ParityError as err:
            log.info("int8 with the %d most sensitive of %d MatMul groups in fp32 missed its gate: %s",
                     keep, len(groups), err)
            error = err
            continue
        return {**figures, "quantized_matmuls": float(count), "fp32_matmul_groups": float(keep)}
    assert error is not None
    raise error


def quantize(smoothed: Path, dst: Path, matmuls: list[str], keep_fp32: list[str], feeds: Feeds, cache: Path) -> int:
    """quantize_static of `matmuls` but `keep_fp32` (see the module docstring); returns how many are int8.
    Calibration runs once per `cache` file; later calls reuse its ranges."""
    chosen = [n for n in matmuls if n not in set(keep_fp32)]
    onnxfiles.clear(dst)  # a large graph's data file would be appended to (export.onnxfiles)
    quantize_static(
        smoothed, dst, _Reader(feeds), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
        nodes_to_quantize=chosen, per_channel=True, reduce_range=False,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul"]}, calibration_cache_path=cache,
        use_external_data_format=onnxfiles.large_graph(smoothed),
    )
    return len(chosen)


def sensitivity_order(smoothed: Path, groups: list[list[str]], feeds: Feeds, cache: Path,
                      reference: list[Batch]) -> list[int]:
    """Group indices, most sensitive first: each group quantised alone, its mean error on `reference`."""
    everything = [n for g in groups for n in g]
    errors = []
    with tempfile.TemporaryDirectory(dir=smoothed.parent) as work:
        single = Path(work) / "single.onnx"
        for group in groups:
            quantize(smoothed, single, everything, [n for n in everything if n not in group], feeds, cache)
            errors.append(output_error(open_session(single, "cpu"), reference))
    order = sorted(range(len(groups)), key=lambda i: -errors[i])
    log.info("int8 sensitivity (group: error), most sensitive first: %s",
             ", ".join(f"{i}: {errors[i]:.3g}" for i in order))
    return order


def output_error(session: object, reference: list[Batch]) -> float:
    """Mean |logits - eager logits| when the graph has logits (labels are what flips), else mean 1 - cosine
    of the embeddings."""
    name = "logits" if "logits" in reference[0].expected else "embeddings"
    errors = []
    for batch in reference:
        got = session.run([name], batch.inputs)[0]  # type: ignore[attr-defined]  # (B, C) or (B, D)
        want = batch.expected[name]
        if name == "logits":
            errors.append(np.abs(got - want).mean(axis=-1))
        else:
            norms = np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1)  # (B,)
            errors.append(1.0 - (got * want).sum(-1) / np.maximum(norms, 1e-12))
    return float(np.concatenate(errors).mean())
