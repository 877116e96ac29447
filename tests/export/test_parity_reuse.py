"""What export.parity reuses between the runs of a gate, and that reusing changes no figure: a fast-kind set's eager
outputs are held after their first pass (the float64 pass, export.rounding), so the graphs checked after it run no
eager model; the attention kind's (maps: too large to hold) are computed again each pass; and one onnxruntime run per
batch serves both of check_graph's comparisons, giving the figures that running the float64 texts on their own does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle.session import open_session
from export.gates import EXACT_VARIANTS
from export.graphs import export_graph
from export.parity import References, check_graph, run, tally
from export.parity_texts import parity_batches
from export.rounding import float64_references
from model.load import load_model
from tests.helpers.families import RELEVANCE, save_hf

MAX_LENGTH = 64
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("reuse")
    save_hf(root / "source", "bert", "ForSequenceClassification", "small", names=RELEVANCE)
    return load_model(root / "source")


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
def test_one_run_per_batch_gives_the_figures_of_two(loaded, tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.onnx"
    export_graph(loaded.encoder, kind, path)
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
