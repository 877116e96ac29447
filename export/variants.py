"""Derived graphs: fp32-opt (transformer optimiser), int8 (dynamic quantisation), fp16 (CUDA).

Each function reads an fp32 graph and writes a new file; parity is checked by the caller
(export.parity), never here. Choices below were measured on MiniLM, batch 32 x 128 tokens, on a
2-core AVX-512 VNNI CPU: see docs/export.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.optimizer import optimize_model

from model.config import EncoderConfig

log = logging.getLogger(__name__)

VARIANTS = ("fp32", "fp32-opt", "int8", "fp16")
# Variants each graph kind is built in; the attention graph is a debugging/inspection path.
KIND_VARIANTS = {"fast": VARIANTS, "attention": ("fp32", "fp16")}
PROVIDERS = {
    "fp32": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "fp32-opt": ["CPUExecutionProvider"],
    "int8": ["CPUExecutionProvider"],
    "fp16": ["CUDAExecutionProvider"],
}


class VariantError(RuntimeError):
    """A derived graph could not be built or lost an output on the way."""


def optimize(src: Path, dst: Path, config: EncoderConfig) -> None:
    """Fuse attention, layer norm, GELU and bias adds for the CPU provider."""
    model = optimize_model(
        str(src), model_type="bert", num_heads=config.num_heads, hidden_size=config.d_model,
        opt_level=1, use_gpu=False,
    )
    log.info("fp32-opt fusions: %s", model.get_fused_operator_statistics())
    model.save_model_to_file(str(dst))
    _check_outputs(src, dst)


def quantize(src: Path, dst: Path) -> None:
    """Dynamic int8: QInt8 weights per channel, MatMulInteger (QOperator-free) ops, full range."""
    quantize_dynamic(
        src, dst, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
        op_types_to_quantize=["MatMul", "Gemm"],
    )
    _check_outputs(src, dst)


def to_fp16(src: Path, dst: Path) -> None:
    """Half-precision weights and activations; inputs/outputs stay int64/float32 (keep_io_types)."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = OnnxModel(onnx.load(str(src)))
    model.convert_float_to_float16(keep_io_types=True, use_symbolic_shape_infer=True)
    model.save_model_to_file(str(dst))
    _check_outputs(src, dst)


def build(variant: str, src: Path, dst: Path, config: EncoderConfig) -> None:
    if variant == "fp32-opt":
        optimize(src, dst, config)
    elif variant == "int8":
        quantize(src, dst)
    elif variant == "fp16":
        to_fp16(src, dst)
    else:
        raise VariantError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS[1:])}")


def _check_outputs(src: Path, dst: Path) -> None:
    expected = [o.name for o in onnx.load(str(src), load_external_data=False).graph.output]
    got = [o.name for o in onnx.load(str(dst), load_external_data=False).graph.output]
    if got != expected:
        raise VariantError(f"{dst.name}: outputs {got} differ from the fp32 graph's {expected}")
