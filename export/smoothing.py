"""SmoothQuant in the ONNX graph: move activation outliers into the weights before static int8.

Shape letters: N tokens (batch x sequence, flattened), K a MatMul's input width, M its output width.

For a MatMul y = x W with a constant W (K, M) and any positive s (K,),

    y = (x / s) (diag(s) W)

holds exactly, up to float rounding. With s_j = max|x_j|^alpha / max|W_j|^(1 - alpha) per input channel
j (SmoothQuant, Xiao et al. 2022) the few channels with large activations (MiniLM's LayerNorm and GELU
outputs reach 15-30 where the median channel stays under 2) are scaled down to the others, so one
activation scale per tensor covers them, and the weights, quantised per output column anyway, take a
little more range in exchange.

The division is an explicit Mul in front of the MatMuls that share x (q, k and v share theirs). It
cannot be folded into the LayerNorm before them: in a post-norm BERT that LayerNorm's output also
feeds the residual, which must stay unscaled; and the feed-forward's second MatMul reads a GELU.
The Mul also gives the quantiser a tensor of its own to quantise, so the residual path stays fp32.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export import onnxfiles

DEFAULT_ALPHA = 0.65  # measured on the default model, docs/int8.md
SUFFIX = "_smoothed"


def matmul_groups(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """Input tensor -> the MatMuls with a constant weight reading it, in graph order."""
    constants = {i.name for i in model.graph.initializer}
    groups: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in constants:
            groups.setdefault(node.input[0], []).append(node)
    return groups


def activation_maxima(path: Path, tensors: list[str], feeds: Iterable[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """max |x_j| per channel (last axis) of each tensor over all runs of `feeds` (unpadded, batch 1)."""
    session = _session_with_outputs(path, tensors)
    maxima: dict[str, np.ndarray] = {}
    for feed in feeds:
        for name, value in zip(tensors, session.run(tensors, feed), strict=True):
            channel_max = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)  # (K,)
            maxima[name] = np.maximum(maxima[name], channel_max) if name in maxima else channel_max
    return maxima


def _session_with_outputs(path: Path, tensors: list[str]) -> Any:
    """A CPU session on the graph at `path` with `tensors` added to its outputs. The graph is read without its
    external data and the changed copy written beside it, so it reads the same data file (no copy of the
    weights, and no in-memory model over protobuf's 2 GiB limit)."""
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    listed = {o.name for o in model.graph.output}
    model.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in tensors if t not in listed)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.stem}.outputs-", suffix=".onnx") as copy:
        onnx.save(model, copy.name)
        return ort.InferenceSession(copy.name, providers=["CPUExecutionProvider"])


def smoothing_scales(x_max: np.ndarray, weights: list[np.ndarray], alpha: float) -> np.ndarray:
    """s (K,) for one input shared by `weights` (each (K, M)): x_max^alpha / w_max^(1 - alpha)."""
    w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)  # (K,)
    scales = np.power(np.maximum(x_max, 1e-5), alpha) / np.power(np.maximum(w_max, 1e-5), 1 - alpha)
    return scales.astype(np.float32)


def smooth(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]], alpha: float = DEFAULT_ALPHA) -> list[list[str]]:
    """Write the smoothed graph of `src` to `dst`; returns the MatMul node names per input, in graph order."""
    model = onnx.load(str(src))
    groups = matmul_groups(model)
    maxima = activation_maxima(src, list(groups), feeds)
    weights = {i.name: i for i in model.graph.initializer}
    for tensor, nodes in groups.items():
        arrays = [numpy_helper.to_array(weights[n.input[1]]) for n in nodes]
        scales = smoothing_scales(maxima[tensor], arrays, alpha)
        for node, array in zip(nodes, arrays, strict=True):
            weights[node.input[1]].CopyFrom(numpy_helper.from_array(array * scales[:, None], node.input[1]))
        _insert_division(model, tensor, nodes, scales)
    onnxfiles.save(model, dst, onnxfiles.large_graph(src))
    return [[n.name for n in nodes] for nodes in groups.values()]


def _insert_division(model: onnx.ModelProto, tensor: str, nodes: list[onnx.NodeProto], scales: np.ndarray) -> None:
    """x -> Mul(x, 1 / s) -> the group's MatMuls, placed just before the first of them (a topological spot)."""
    inverse, smoothed = f"{tensor}{SUFFIX}_inverse", f"{tensor}{SUFFIX}"
    model.graph.initializer.append(numpy_helper.from_array((1.0 / scales).astype(np.float32), inverse))
    mul = helper.make_node("Mul", [tensor, inverse], [smoothed], name=f"{tensor}{SUFFIX}_mul")
    position = list(model.graph.node).index(nodes[0])
    model.graph.node.insert(position, mul)
    for node in nodes:
        node.input[0] = smoothed
