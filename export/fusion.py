"""Put the exported graph into the forms onnxruntime's transformer optimiser fuses, value for value.

Shape letters: B batch, T sequence.

onnxruntime's optimiser (export.variants.optimize) matches fixed subgraph patterns. Our encoder computes
its position ids as `arange(T)[None]`, exported as Gather(table, Unsqueeze(Range(0, T, 1), [0])) with T
read off an input's shape: a (1, T) index that none of the optimiser's embedding patterns match, so the
word + position + token-type sum and its LayerNorm stayed five nodes instead of one
EmbedLayerNormalization. DistilBERT exports the same ids as Expand(Unsqueeze(Range(0, T, 1), [0]),
Shape(input_ids)), a pattern the optimiser knows; `expand_position_ids` rewrites ours into it. The ids
are the same numbers (each row of the expanded (B, T) index equals the (1, T) one), and the fused
kernel adds word + position + token type in the order PyTorch does, so the graph stays exact.

A graph without that pattern (another position scheme) is left as it is: its embedding stays unfused,
which bench/fusion.py shows in its table of fused operators.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bundle.feeds import INPUT_NAMES, KNOWN_INPUTS

_IDS = INPUT_NAMES[0]  # "input_ids"


def expand_position_ids(model: onnx.ModelProto) -> int:
    """Rewrite each Gather(table, Unsqueeze(Range(0, T, 1), [0])) whose T is the inputs' sequence length
    into the DistilBERT form above, in place; returns how many were rewritten."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    constants, tables = _constants(graph), {i.name for i in graph.initializer}
    rewritten = 0
    for gather in [n for n in graph.node if n.op_type == "Gather" and n.input[0] in tables]:
        unsqueeze = producers.get(gather.input[1])
        if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or not _is(constants, unsqueeze.input[1:], [0]):
            continue
        arange = producers.get(unsqueeze.input[0])
        if arange is None or arange.op_type != "Range" or not _arange_of_sequence(arange, producers, constants):
            continue
        gather.input[1] = _add_expanded_positions(graph, f"{gather.name or gather.output[0]}_positions")
        rewritten += 1
    return rewritten


def _add_expanded_positions(graph: onnx.GraphProto, prefix: str) -> str:
    """Nodes computing Expand(Unsqueeze(Range(0, Shape(input_ids)[1], 1), [0]), Shape(input_ids)): (B, T) int64."""
    def name(part: str) -> str:
        return f"{prefix}_{part}"

    graph.initializer.extend([
        numpy_helper.from_array(np.array(0, np.int64), name("zero")),
        numpy_helper.from_array(np.array(1, np.int64), name("one")),
        numpy_helper.from_array(np.array([0], np.int64), name("axes")),
    ])
    nodes = [
        helper.make_node("Shape", [_IDS], [name("shape")], name=name("shape")),  # (2,): B, T
        helper.make_node("Gather", [name("shape"), name("one")], [name("length")], name=name("length"), axis=0),
        helper.make_node("Range", [name("zero"), name("length"), name("one")], [name("range")], name=name("range")),
        helper.make_node("Unsqueeze", [name("range"), name("axes")], [name("row")], name=name("row")),  # (1, T)
        helper.make_node("Expand", [name("row"), name("shape")], [name("ids")], name=name("ids")),  # (B, T)
    ]
    for index, node in enumerate(nodes):  # they read only the graph input and constants: first is in order
        graph.node.insert(index, node)
    return name("ids")


def _arange_of_sequence(arange: onnx.NodeProto, producers: dict[str, onnx.NodeProto],
                        constants: dict[str, np.ndarray]) -> bool:
    """Range(0, T, 1) where T is the sequence length of an input: Squeeze(Shape(input, start=1, end=2)) or
    Gather(Shape(input), 1)."""
    if not (_is(constants, arange.input[:1], 0) and _is(constants, arange.input[2:], 1)):
        return False
    length = producers.get(arange.input[1])
    if length is None or length.op_type not in ("Squeeze", "Gather"):
        return False
    shape = producers.get(length.input[0])
    if shape is None or shape.op_type != "Shape" or shape.input[0] not in KNOWN_INPUTS:  # every input is (B, T)
        return False
    bounds = {a.name: helper.get_attribute_value(a) for a in shape.attribute}
    if length.op_type == "Squeeze":
        return (bounds.get("start"), bounds.get("end")) == (1, 2)
    return not bounds and _is(constants, length.input[1:], 1)


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values of small initializers, Constant nodes, and CastLike of a Constant (the exporter's typed 0 and 1)."""
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer if np.prod(i.dims) <= 8}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        elif node.op_type == "CastLike" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    return values


def _is(constants: dict[str, np.ndarray], names: Sequence[str], expected: int | list[int]) -> bool:
    """`names` is one constant input whose value is `expected`."""
    return len(names) == 1 and names[0] in constants and np.array_equal(constants[names[0]], expected)
