"""What export.parity reuses between the runs of a gate, and that reusing changes no figure: a fast-kind set's eager
outputs are held after their first pass (the float64 pass, export.rounding), so the graphs checked after it run no
eager model; the attention kind's (maps: too large to hold) are computed again each pass; and one onnxruntime run per
batch serves both of check_graph's comparisons, giving the figures that running the float64 texts on their own does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bundle.session import open_session
from export.gates import EXACT_VARIANTS
from export.parity import check_graph, run, tally
from export.parity_texts import parity_batches
from export.references import References
from export.rounding import float64_references
from model.load import load_model

MAX_LENGTH = 64
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def loaded(cross_encoder_graphs: tuple[Path, Path, Path]):  # type: ignore[no-untyped-def]
    return load_model(cross_encoder_graphs[0])


def counted(loaded, monkeypatch: pytest.MonkeyPatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The encoder's eager calls, counted from now on."""
    calls = [0]
    forward = loaded.encoder.forward

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(loaded.encoder, "forward", counting)
    return calls


@pytest.mark.parametrize("kind,held", [("fast", True), ("attention", False)])
def test_a_sets_eager_outputs_are_held_for_the_fast_kind_only(loaded, monkeypatch, kind, held) -> None:
    references = References(loaded, parity_batches(), MAX_LENGTH, kind)
    first = list(references)
    calls = counted(loaded, monkeypatch)
    again = list(references)
    assert calls[0] == (0 if held else len(first)) and len(again) == len(first)
    assert all((a is b) == held for a, b in zip(first, again, strict=True))


@pytest.mark.parametrize("kind", ["fast", "attention"])
def test_one_run_per_batch_gives_the_figures_of_two(loaded, cross_encoder_graphs: tuple[Path, Path, Path],
                                                    kind: str) -> None:
    path = cross_encoder_graphs[1 if kind == "fast" else 2]  # the model's graphs, exported once for the run
    references = References(loaded, parity_batches(), MAX_LENGTH, kind)
    rounding = float64_references({"": references})[""]
    assert "fp32" in EXACT_VARIANTS and len(rounding.batches) > 1
    session = open_session(path, "cpu", kind=kind)
    names = [o.name for o in session.get_outputs()]
    separately = tally(run(session, references), names) | rounding.figures(tally(run(session, rounding.batches), names))
    together = check_graph(path, "fp32", CPU, references, rounding)
    assert together == {k: v for k, v in separately.items() if k in together} and together


@pytest.mark.parametrize("kind", ["fast", "attention"])
def test_a_batch_left_out_is_never_run_for_the_attention_kind(loaded, monkeypatch, kind: str) -> None:
    """export.rounding's float64 texts: the attention kind is asked about each batch before its eager run (its maps
    can be gigabytes), with the bytes its outputs will have; the fast kind runs and holds every batch."""
    references = References(loaded, parity_batches(), MAX_LENGTH, kind)
    calls = counted(loaded, monkeypatch)
    asked: list[int] = []
    assert list(references.admitted(lambda size: asked.append(size) is not None)) == []
    assert calls[0] == (0 if kind == "attention" else len(asked))
    every = list(references.admitted(lambda size: True))
    assert asked == [sum(b.expected[n].nbytes for n in b.expected) for b in every]  # the bytes it was asked with


def test_the_fast_sets_float64_texts_are_its_attention_twins(loaded) -> None:
    """export.rounding's twins: the fast set's float64 references are the attention set's without the maps, the same
    inputs and the same values as the fast set's own float64 run; under a budget that leaves attention batches out,
    the texts left out are run on their own, so every parity text is still in the fast set's float64 texts."""
    sets = {kind: References(loaded, parity_batches(), MAX_LENGTH, kind) for kind in ("fast", "attention")}
    own = float64_references({"fast": sets["fast"]})["fast"]
    twinned = float64_references(sets, twins={"fast": "attention"})["fast"]
    assert len(twinned.batches) == len(own.batches) > 1 and twinned.eager == own.eager
    for a, b in zip(twinned.batches, own.batches, strict=True):
        assert a.inputs.keys() == b.inputs.keys() and all(np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
        assert a.expected.keys() == b.expected.keys()
        assert all(np.array_equal(a.expected[k], b.expected[k]) for k in a.expected)
    tight = float64_references(sets, budget=1, twins={"fast": "attention"})
    assert len(tight["attention"].batches) == 1  # the first batch only
    rows = sum(len(b.inputs["input_ids"]) for b in tight["fast"].batches)
    assert rows == sum(len(batch) for batch in parity_batches())
