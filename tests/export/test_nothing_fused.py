"""fp32-opt is not built where onnxruntime's optimiser fuses nothing but norms (export.variants.NothingFused): a
decoder's graph, which has none of the ops the optimiser's other fusions start from, is not optimised at all and
gets fp32 alone for the fast kind, the warning says why, and the one fast graph gets its invariance and no timings
(that the optimiser would have fused only its norms is checked on every family's graph by
tests/export/test_families.py); an encoder's, whose attention fuses, keeps fp32-opt (tests/export/test_fusion.py),
as does a LoRA model's, whose norms and GELU fuse (tests/export/test_adapters.py).
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


def test_fp32_opt_is_left_out_where_only_norms_fuse(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    save_decoder(tmp_path / "source", "qwen3", "Model", "small")
    monkeypatch.setattr(variants, "optimize", lambda *args, **kwargs: pytest.fail("the optimiser ran"))
    with caplog.at_level(logging.WARNING, logger="export.bundle"):
        manifest = export_bundle(tmp_path / "source", tmp_path / "bundle", variants=("fp32", "fp32-opt"))
    assert sorted((g.kind, g.variant) for g in manifest.graphs) == [("attention", "fp32"), ("fast", "fp32")]
    assert not list((tmp_path / "bundle").glob("*fp32-opt*"))
    warned = [r.message for r in caplog.records if "where onnxruntime's optimiser starts every fusion" in r.message]
    assert len(warned) == 1 and "LayerNormalization, Gelu, Erf, Tanh" in warned[0], warned
    fast = next(g for g in Manifest.read(tmp_path / "bundle").graphs if g.kind == "fast")
    cpu = fast.measured["cpu"]  # its invariance, and no timings: nothing to choose between
    assert cpu.batch_max_abs_diff >= 0 and not cpu.ms_per_batch


def test_anything_but_norms_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoder's real optimisation reported with all but its LayerNormalizations zeroed: left out; with its
    attention alone zeroed (its GELU and residual adds still fused): kept."""
    optimize = variants.optimize
    save_hf(tmp_path / "source", "bert", "ForSequenceClassification", "small", names=RELEVANCE)
    for kept, name in ((variants.NORM_OPS, "norms"), (("Gelu", "BiasGelu", "SkipLayerNormalization"), "more")):
        def reported(*args, kept=kept, **kwargs):  # type: ignore[no-untyped-def]
            fused = optimize(*args, **kwargs)
            assert fused.get("Attention")  # an encoder: its attention fuses
            return {op: (n if op in kept else 0) for op, n in fused.items()}

        monkeypatch.setattr(variants, "optimize", reported)
        manifest = export_bundle(tmp_path / "source", tmp_path / name, variants=("fp32", "fp32-opt"))
        built = ("fast", "fp32-opt") in {(g.kind, g.variant) for g in manifest.graphs}
        assert built == (name == "more"), name
