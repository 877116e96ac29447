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


# Attention projections of each encoder block, in graph order: q, k, v, out. int8 tries the wider
# scope first and keeps the first that passes the parity gate (export.bundle); the feed-forward
# MatMuls always stay fp32.
INT8_SCOPES: tuple[tuple[str, ...], ...] = (("q", "k", "v", "out"), ("q", "k"))
_PROJECTIONS = ("q", "k", "v", "out")


def quantize(src: Path, dst: Path, config: EncoderConfig, scope: tuple[str, ...] = INT8_SCOPES[0]) -> int:
    """Dynamic int8 (QInt8 weights per channel, full range) of the `scope` projections; returns their count.

    Why not every MatMul: their inputs (LayerNorm outputs with BERT's outlier features, GELU
    outputs) lose too much under per-tensor dynamic activation quantisation. On MiniLM the min
    embedding cosine is 0.967 with all quantised and 0.9905 with q/k/v/out only (gate 0.99); v and
    out sit on the residual path, so q/k-only is the fallback that keeps labels (see docs/export.md).
    """
    nodes = attention_projections(src, config, scope)
    quantize_dynamic(
        src, dst, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
        op_types_to_quantize=["MatMul", "Gemm"], nodes_to_quantize=nodes,
    )
    _check_outputs(src, dst)
    return len(nodes)


def attention_projections(path: Path, config: EncoderConfig, scope: tuple[str, ...]) -> list[str]:
    """MatMul/Gemm nodes with a constant (D, D) weight, taken 4 per block as q, k, v, out."""
    model = onnx.load(str(path), load_external_data=False)
    square = {i.name for i in model.graph.initializer if tuple(i.dims) == (config.d_model, config.d_model)}
    nodes = [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and square & set(n.input)]
    blocks = nodes[: 4 * config.num_layers]  # a pooler or attention head's weights come after
    return [n for i, n in enumerate(blocks) if _PROJECTIONS[i % 4] in scope]


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
        quantize(src, dst, config)
    elif variant == "fp16":
        to_fp16(src, dst)
    else:
        raise VariantError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS[1:])}")


def _check_outputs(src: Path, dst: Path) -> None:
    expected = [o.name for o in onnx.load(str(src), load_external_data=False).graph.output]
    got = [o.name for o in onnx.load(str(dst), load_external_data=False).graph.output]
    if got != expected:
        raise VariantError(f"{dst.name}: outputs {got} differ from the fp32 graph's {expected}")
