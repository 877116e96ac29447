"""fp32-opt is not built where onnxruntime's optimiser fuses nothing (export.variants.NothingFused): the bundle holds
fp32 alone for the fast kind, the warning says why, and the one fast graph gets its invariance and no timings. No
family here makes such a graph (each fuses its norms at least), so a small BERT's real optimisation is run with the
optimiser's report zeroed: the graphs are the real ones, only the count that decides is not.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bundle.manifest import Manifest
from export import variants
from export.bundle import export_bundle
from tests.helpers.families import RELEVANCE, save_hf


def test_fp32_opt_is_left_out_when_nothing_fuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    optimize = variants.optimize
    monkeypatch.setattr(variants, "optimize", lambda *args, **kw: dict.fromkeys(optimize(*args, **kw), 0))
    save_hf(tmp_path / "source", "bert", "ForSequenceClassification", "small", names=RELEVANCE)
    with caplog.at_level(logging.WARNING, logger="export.bundle"):
        manifest = export_bundle(tmp_path / "source", tmp_path / "bundle", variants=("fp32", "fp32-opt"))
    assert sorted((g.kind, g.variant) for g in manifest.graphs) == [("attention", "fp32"), ("fast", "fp32")]
    assert not list((tmp_path / "bundle").glob("*fp32-opt*"))
    assert any("fused nothing in this graph; fp32-opt would be the fp32 graph again" in r.message
               for r in caplog.records)
    fast = next(g for g in Manifest.read(tmp_path / "bundle").graphs if g.kind == "fast")
    cpu = fast.measured["cpu"]  # its invariance, and no timings: nothing to choose between
    assert cpu.batch_max_abs_diff >= 0 and not cpu.ms_per_batch
