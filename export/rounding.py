"""The exact gates' reference (export.gates): the same eager model run in float64, and the error eager float32
PyTorch itself makes against it.

Shape letters: B batch, T sequence.

One float64 copy of the encoder serves every set of texts of every graph kind (float64_references), and is let go
before any graph is exported or opened. What it costs: the copy holds the weights at twice their float32 bytes,
beside the float32 model, for the length of the pass (3 x the float32 weights resident, within the export's budget,
export.parity.MEMORY_BUDGET_WEIGHTS); the pass runs each set's texts once in float32 and once in float64 (float64
matmuls take about twice float32's time on a CPU). Its outputs are held for the checks, up to FLOAT64_BYTES per set:
the parity texts in order, a batch whose outputs would pass the budget left out (a large model's attention maps of
its longest texts), so the short and medium texts are always in. On tests/export/test_export_memory.py's 12-layer
ModernBERT the export's peak resident memory grows from 1.11 to 1.40 GiB (its attention maps of the 512-token
batch, 243 MiB in float64, are held), within the budget.
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from export.gates import EAGER, ERROR, LIMIT, SCALE, exact_limit, merge_worst
from export.graphs import GraphModule
from export.parity import tally
from export.references import Batch, References
from model.encoder import Encoder

# The float64 outputs held for one set of texts (one graph kind, one adapter set), at most; the first batch is kept
# whatever its size.
FLOAT64_BYTES = 256 << 20
Key = TypeVar("Key")


@dataclass
class Rounding:
    """The float64 texts of one set: `batches`, their float64 outputs as `expected`, and `eager`, eager float32's
    figures against them ({output}_max_abs_diff: the max abs error on real tokens; {output}_max_abs: the scale)."""

    batches: list[Batch]
    eager: dict[str, float]

    def figures(self, graph: dict[str, float]) -> dict[str, float]:
        """The exact gate's figures of a graph (export.gates), from its tally against `batches`."""
        out: dict[str, float] = {}
        for key in (k for k in self.eager if k.endswith("_max_abs_diff")):
            output = key.removesuffix("_max_abs_diff")
            out |= {output + ERROR: graph[key], output + EAGER: self.eager[key],
                    output + SCALE: self.eager[f"{output}_max_abs"]}
            out[output + LIMIT] = exact_limit(out, output)
        return out


def eager_figures(batch64: Batch, eager32: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, float]:
    """A Rounding's `eager` figures of one batch: float64 outputs (`batch64.expected`) against eager float32's."""
    figures = tally([(batch64, eager32)], names)
    return {key: value for key, value in figures.items() if key.endswith(("_max_abs_diff", "_max_abs"))}


def float64_copy(encoder: Encoder) -> Encoder:
    """A copy of `encoder` whose floating parameters and buffers are float64 (the same values, exactly), made without
    a float32 copy first; tied weights stay tied."""
    memo: dict[int, object] = {}
    for tensors in (encoder.named_parameters(remove_duplicate=False), encoder.named_buffers(remove_duplicate=False)):
        for _, tensor in tensors:
            if tensor.is_floating_point() and id(tensor) not in memo:
                double = tensor.detach().to(torch.float64)
                memo[id(tensor)] = torch.nn.Parameter(double, requires_grad=False) if isinstance(
                    tensor, torch.nn.Parameter) else double
    return copy.deepcopy(encoder, memo).eval()


def float64_references(sets: Mapping[Key, References], budget: int = FLOAT64_BYTES,
                       twins: Mapping[Key, Key] | None = None) -> dict[Key, Rounding]:
    """Each set's Rounding, by the set's key (all sets of one model), from one float64 copy, let go on return.

    `twins`: a fast-kind set's key -> the key of the attention-kind set of the same texts. The fast set's Rounding is
    then its twin's without the maps (the attention graph's other outputs come from the fast graph's ops, export.graphs
    .fast_from_attention, and the eager model's from the same code: the same values), plus its own run of the texts
    whose maps the twin left out of its budget. The fast kind's texts are run in float64 once, not twice: a 0.6B
    model's 5 x 600-token parity batch, whose maps are run a text at a time, is not run whole in float64 again."""
    if not sets:
        return {}
    twins = twins or {}
    encoder = float64_copy(next(iter(sets.values())).model.encoder)
    try:
        out: dict[Key, Rounding] = {}
        left_out: dict[Key, list[References]] = {}
        for key in sorted(sets, key=lambda k: k not in twins.values()):  # the twins first
            if key in twins:
                out[key] = _without_maps(out[twins[key]], left_out[twins[key]], encoder, budget)
            else:
                left_out[key] = []
                out[key] = _rounding(sets[key], encoder, budget, left_out[key])
        return out
    finally:
        del encoder
        gc.collect()


def _without_maps(twin: Rounding, left_out: list[References], encoder: Encoder, budget: int) -> Rounding:
    """A fast-kind set's Rounding from its attention twin's, and the texts the twin left out run on their own."""
    batches = [Batch(b.inputs, {n: v for n, v in b.expected.items() if n != "attentions"}) for b in twin.batches]
    eager = {k: v for k, v in twin.eager.items() if not k.startswith("attentions_")}
    for references in left_out:
        alone = _rounding(references, encoder, budget)
        batches += alone.batches
        eager = merge_worst(eager, alone.eager)
    return Rounding(batches, eager)


def _rounding(references: References, encoder: Encoder, budget: int,
              left_out: list[References] | None = None) -> Rounding:
    """One set's float64 texts, run through `encoder` (float64) batch by batch as the set runs in float32; the
    attention kind's batches left out of the budget are put in `left_out` (References.admitted)."""
    module = GraphModule(encoder, references.kind, references.token_types).eval()
    held: list[Batch] = []
    eager: dict[str, float] = {}
    used = 0

    def admit(size: int) -> bool:  # the float32 bytes of a batch's outputs: is the float64 copy within the budget?
        return not held or used + 2 * size <= budget

    for single in references.admitted(admit, left_out):
        size = 2 * sum(value.nbytes for value in single.expected.values())  # its float64 outputs
        with torch.no_grad():
            values = module(**{name: torch.from_numpy(single.inputs[name]) for name in module.input_names})
        held.append(Batch(single.inputs, {n: v.numpy() for n, v in zip(module.names, values, strict=True)}))
        eager = merge_worst(eager, eager_figures(held[-1], single.expected, module.names))
        used += size
    return Rounding(held, eager)
