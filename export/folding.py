"""A weight's Transpose folded into the weight: the fp32 graphs store each projection as MatMul reads it.

The dynamo exporter writes a Linear as MatMul(x, Transpose(W)) with W (out, in) as PyTorch holds it. onnxruntime
folds the Transpose when it opens the graph, into a new tensor of the session's own, so every session holds W^T
beside the W it was given: sessions handed one shared copy of W (bundle.weights) would each still make their own
W^T. Folded here, once, the graph stores W^T (in, out) and MatMul reads it directly; the fused fp32-opt graph
(export.variants.optimize) folds the same Transposes to the same bytes, so every fp32 graph of a bundle reads the
same tensors (export.shared_weights). The arithmetic is unchanged: MatMul multiplies the same numbers.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def fold_weight_transposes(graph: ir.Graph) -> int:
    """Replace every Transpose of an initializer that nothing else reads (and that is no graph output) by the
    transposed initializer, named as the Transpose's output, in place. Returns how many were folded."""
    folded = [node for node in graph if node.op_type == "Transpose" and _lone_weight(node.inputs[0])]
    for node in folded:
        weight, output = node.inputs[0], node.outputs[0]
        assert weight is not None and weight.const_value is not None and weight.name is not None
        assert weight.dtype is not None
        array = weight.const_value.numpy()
        perm = node.attributes["perm"].as_ints() if "perm" in node.attributes else list(range(array.ndim))[::-1]
        name = output.name
        value = ir.Value(name=None, shape=ir.Shape(array.transpose(perm).shape), type=ir.TensorType(weight.dtype))
        value.const_value = ir.tensor(np.ascontiguousarray(array.transpose(perm)))
        output.replace_all_uses_with(value, replace_graph_outputs=False)
        graph.remove(node, safe=True)
        graph.initializers.pop(weight.name)
        value.name = name
        graph.register_initializer(value)
    return len(folded)


def _lone_weight(value: ir.Value | None) -> bool:
    return (value is not None and value.is_initializer() and value.const_value is not None
            and len(value.uses()) == 1 and not value.is_graph_output())
