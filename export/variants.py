"""Derived graphs: fp32-opt (transformer optimiser), int8-dynamic (dynamic quantisation), fp16 (CUDA).

The static int8 variant (calibrated, batch-invariant) is built by export.int8.

Each function reads an fp32 graph and writes a new file, with its own external data file when the fp32 graph
is large (export.onnxfiles); parity is checked by the caller (export.parity), never here. The choices below
rest on measurements of MiniLM, batch 32 x 128 tokens, on a 2-core AVX-512 VNNI CPU: see docs/export.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

from bundle.variants import VARIANTS
from export import onnxfiles
from export.fusion import expand_position_ids
from model.config import EncoderConfig

log = logging.getLogger(__name__)

# Variants each graph kind is built in; the attention graph is a debugging/inspection path.
KIND_VARIANTS = {"fast": VARIANTS, "attention": ("fp32", "fp16")}
PROVIDERS = {
    "fp32": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "fp32-opt": ["CPUExecutionProvider"],
    "int8": ["CPUExecutionProvider"],
    "int8-dynamic": ["CPUExecutionProvider"],
    "fp16": ["CUDAExecutionProvider"],
}


# Fused operators that alone do not make fp32-opt worth building (NothingFused): a decoder's RMSNorms
NORM_OPS = ("LayerNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")
# The ops the optimiser's other fusions start from: its attention, skip and embedding norm fusions search from a
# LayerNormalization, its GELU fusions from Gelu, Erf or Tanh. A graph without any (a decoder's: RMSNorm, SiLU,
# rotary attention) can only have its norms fused, so it is not optimised at all (NothingFused, before the
# optimiser's minutes and memory at 0.6B parameters); tests/export/test_families.py checks on every family's graph
# that the optimiser fuses nothing else where this says so.
FUSION_ANCHORS = ("LayerNormalization", "Gelu", "Erf", "Tanh")


class VariantError(RuntimeError):
    """A derived graph could not be built or lost an output on the way."""


class NothingFused(VariantError):
    """onnxruntime's optimiser fused nothing but norms: fp32-opt is not built. A decoder's graph fuses only its
    RMSNorms (SimplifiedLayerNormalization; its rotary grouped-query attention matches no pattern) and is served as
    fast by fp32: the Qwen3-Embedding-0.6B shape's `auto` chose fp32 on a quiet machine and fp32-opt on a loaded one
    (docs/export.md), while its gate, the speed timings of two fast graphs and a second invariance run cost 270 of the
    export's 817 s. Where the attention, GELU or the residual adds fuse too (the BERT family, the rotary encoders,
    Gemma's GELU, a LoRA model's norms and GELU), fp32-opt is built and measured as before. A graph without any of
    FUSION_ANCHORS is refused before the optimiser runs (fuses_only_norms)."""


def optimize(src: Path, dst: Path, config: EncoderConfig, fuse_attention: bool = True) -> dict[str, int]:
    """Fuse the embeddings, attention, layer norms, GELU and bias adds for the CPU provider; returns the optimiser's
    count of each fused operator.

    The position ids are first put in the form the optimiser's embedding fusion knows (export.fusion).
    The fused Attention gets the raw (B, T) attention mask, not BERT's default "mask index" (the
    count of real tokens, which assumes right padding), so any 0/1 mask means what it does in PyTorch.
    """
    large = onnxfiles.large_graph(src)
    staged = dst.with_name(f"{dst.stem}.positions.onnx")  # a path: given a ModelProto, it moves weights out
    options = FusionOptions("bert")
    options.use_raw_attention_mask(True)
    options.enable_attention = fuse_attention
    try:
        _with_expanded_positions(src, staged, large)
        model = optimize_model(
            str(staged), model_type="bert", num_heads=config.num_heads, hidden_size=config.d_model,
            opt_level=1, use_gpu=False, optimization_options=options,
        )
    finally:
        onnxfiles.clear(staged)
    fused: dict[str, int] = model.get_fused_operator_statistics()
    log.info("fp32-opt fusions: %s", fused)
    onnxfiles.clear(dst)
    model.save_model_to_file(str(dst), use_external_data_format=large)
    _check_outputs(src, dst)
    return fused


def _with_expanded_positions(src: Path, dst: Path, large: bool) -> None:
    """`src` with its position ids in the form the optimiser fuses (export.fusion), written to `dst`; the loaded
    graph is let go on return, before the optimiser loads its own copy."""
    graph = onnx.load(str(src))
    expand_position_ids(graph)
    onnxfiles.save(graph, dst, large)


# int8 scopes, fastest first (docs/export.md); export.bundle keeps the first that passes the parity
# gate. "attention": the fused Attention ops (q, k, v as one packed MatMul) become QAttention;
# "out": the output projection after each; "q", "k", "v", "out" without "attention": projections of
# the graph with attention left unfused, so q and k can be quantised without v. The feed-forward
# MatMuls always stay fp32.
INT8_SCOPES: tuple[tuple[str, ...], ...] = (
    ("attention", "out"), ("attention",), ("q", "k", "v", "out"), ("q", "k"))
_PROJECTIONS = ("q", "k", "v", "out")


def quantize(src: Path, dst: Path, config: EncoderConfig, scope: tuple[str, ...] = INT8_SCOPES[0]) -> int:
    """Dynamic int8 (QInt8 weights per channel, full range) of the `scope` projections of the
    optimised `src`; returns how many projection MatMuls that covers (a QAttention counts 3).

    Why not every MatMul: their inputs (LayerNorm outputs with BERT's outlier features, GELU
    outputs) lose too much under per-tensor dynamic activation quantisation. On MiniLM the min
    embedding cosine is 0.970 with all quantised and 0.9908 with attention + out only (gate 0.99);
    v and out sit on the residual path, so q/k-only is the last fallback that keeps labels.
    """
    fused = "attention" in scope
    staged = dst.with_name(f"{dst.stem}.staged.onnx")
    try:
        optimize(src, staged, config, fuse_attention=fused)
        nodes, matmuls = _int8_nodes(staged, config, scope)
        onnxfiles.clear(dst)
        quantize_dynamic(
            staged, dst, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
            op_types_to_quantize=["Attention", "MatMul", "Gemm"], nodes_to_quantize=nodes,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # lets it type the fused ops
            use_external_data_format=onnxfiles.large_graph(src),
        )
    finally:
        onnxfiles.clear(staged)
    _check_outputs(src, dst)
    return matmuls


def _int8_nodes(path: Path, config: EncoderConfig, scope: tuple[str, ...]) -> tuple[list[str], int]:
    """(nodes to quantise, projection MatMuls they cover): a fused Attention packs q, k and v."""
    if "attention" not in scope:
        nodes = attention_projections(path, config, scope)
        return nodes, len(nodes)
    attention, out = fused_attention_nodes(path)
    return attention + (out if "out" in scope else []), 3 * len(attention) + len(out) * ("out" in scope)


def fused_attention_nodes(path: Path) -> tuple[list[str], list[str]]:
    """(Attention nodes, the output-projection MatMul reading each one's output) of an optimised graph."""
    graph = onnx.load(str(path), load_external_data=False).graph
    attention = {n.output[0]: n.name for n in graph.node if n.op_type == "Attention"}
    out = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[0] in attention]
    return list(attention.values()), out


def attention_projections(path: Path, config: EncoderConfig, scope: tuple[str, ...]) -> list[str]:
    """MatMul/Gemm nodes with a constant (D, D) weight, taken 4 per block as q, k, v, out.

    The weight is an initializer, or (in the exporter's unoptimised graph) a Transpose of one."""
    model = onnx.load(str(path), load_external_data=False)
    square = {i.name for i in model.graph.initializer if tuple(i.dims) == (config.d_model, config.d_model)}
    square |= {n.output[0] for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in square}
    nodes = [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and square & set(n.input)]
    blocks = nodes[: 4 * config.num_layers]  # a pooler or attention head's weights come after
    return [n for i, n in enumerate(blocks) if _PROJECTIONS[i % 4] in scope]


def to_fp16(src: Path, dst: Path) -> None:
    """Half-precision weights and activations; inputs/outputs stay int64/float32 (keep_io_types).

    The exporter's graph (optimize=False, see export.graphs) is first compacted by onnxscript's
    optimiser, as torch.onnx.export(optimize=True) would: onnxruntime's symbolic shape inference,
    which the conversion uses, fails on its Constant(value_ints) nodes."""
    import onnxscript
    from onnxruntime.transformers.onnx_model import OnnxModel

    large = onnxfiles.large_graph(src)
    model = OnnxModel(onnxscript.optimizer.optimize(onnx.load(str(src))))
    model.convert_float_to_float16(keep_io_types=True, use_symbolic_shape_infer=True)
    onnxfiles.clear(dst)
    model.save_model_to_file(str(dst), use_external_data_format=large)
    _check_outputs(src, dst)


def fuses_only_norms(src: Path) -> bool:
    """Whether the graph at `src` has none of FUSION_ANCHORS, so the optimiser could fuse nothing but its norms."""
    graph = onnx.load(str(src), load_external_data=False).graph
    return not any(node.op_type in FUSION_ANCHORS for node in graph.node)


def build(variant: str, src: Path, dst: Path, config: EncoderConfig) -> None:
    if variant == "fp32-opt":
        if fuses_only_norms(src):
            raise NothingFused(f"{dst.name}: this graph has no {', '.join(FUSION_ANCHORS)}, where onnxruntime's "
                               "optimiser starts every fusion but a norm's; fp32-opt would serve no faster than fp32, "
                               "so it is not built (the bundle serves fp32)")
        fused = {op: n for op, n in optimize(src, dst, config).items() if n}
        if set(fused) <= set(NORM_OPS):
            onnxfiles.clear(dst)
            raise NothingFused(f"{dst.name}: onnxruntime's optimiser fused nothing but norms in this graph ("
                               f"{', '.join(f'{op} x{n}' for op, n in fused.items()) or 'nothing at all'}); fp32-opt "
                               "would serve no faster than fp32, so it is not built (the bundle serves fp32)")
    elif variant == "int8-dynamic":
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
