"""fp32-opt is built only where onnxruntime's optimiser fuses attention (export.variants.NothingFused): a decoder's
graph, whose norms alone fuse, gets fp32 alone for the fast kind, the warning says why, and the one fast graph gets
its invariance and no timings; an encoder's, whose attention fuses, keeps fp32-opt (tests/export/test_fusion.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bundle.manifest import Manifest
from export import variants
from export.bundle import export_bundle
from tests.helpers.decoders import save_decoder
from tests.helpers.families import RELEVANCE, save_hf


def test_fp32_opt_is_left_out_where_no_attention_fuses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    save_decoder(tmp_path / "source", "qwen3", "Model", "small")
    with caplog.at_level(logging.WARNING, logger="export.bundle"):
        manifest = export_bundle(tmp_path / "source", tmp_path / "bundle", variants=("fp32", "fp32-opt"))
    assert sorted((g.kind, g.variant) for g in manifest.graphs) == [("attention", "fp32"), ("fast", "fp32")]
    assert not list((tmp_path / "bundle").glob("*fp32-opt*"))
    warned = [r.message for r in caplog.records if "fused no attention in this graph" in r.message]
    assert len(warned) == 1 and "SimplifiedLayerNormalization x" in warned[0], warned
    fast = next(g for g in Manifest.read(tmp_path / "bundle").graphs if g.kind == "fast")
    cpu = fast.measured["cpu"]  # its invariance, and no timings: nothing to choose between
    assert cpu.batch_max_abs_diff >= 0 and not cpu.ms_per_batch


def test_only_attention_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoder's real optimisation with the attention counts zeroed in the optimiser's report: left out too."""
    optimize = variants.optimize

    def without_attention(*args, **kwargs):  # type: ignore[no-untyped-def]
        fused = optimize(*args, **kwargs)
        assert any(fused.get(op) for op in variants.ATTENTION_OPS)  # an encoder: its attention fuses
        return {**fused, **dict.fromkeys(variants.ATTENTION_OPS, 0)}

    monkeypatch.setattr(variants, "optimize", without_attention)
    save_hf(tmp_path / "source", "bert", "ForSequenceClassification", "small", names=RELEVANCE)
    manifest = export_bundle(tmp_path / "source", tmp_path / "bundle", variants=("fp32", "fp32-opt"))
    assert ("fast", "fp32-opt") not in {(g.kind, g.variant) for g in manifest.graphs}
