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
from model.load import load_model
from tests.helpers.decoders import save_decoder


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


def test_anything_but_norms_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    cross_encoder_graphs: tuple[Path, Path, Path]) -> None:
    """An encoder's real optimisation (of the run's shared BERT cross-encoder graph, tests/fixtures.py) reported with
    all but its LayerNormalizations zeroed: not built; with its attention alone zeroed (its GELU and residual adds
    still fused): built. The export leaves out what NothingFused refuses (the test above)."""
    optimize = variants.optimize
    source, fast, _ = cross_encoder_graphs
    config = load_model(source).encoder.config
    for kept, name in ((variants.NORM_OPS, "norms"), (("Gelu", "BiasGelu", "SkipLayerNormalization"), "more")):
        def reported(*args, kept=kept, **kwargs):  # type: ignore[no-untyped-def]
            fused = optimize(*args, **kwargs)
            assert fused.get("Attention")  # an encoder: its attention fuses
            return {op: (n if op in kept else 0) for op, n in fused.items()}

        monkeypatch.setattr(variants, "optimize", reported)
        built = tmp_path / f"{name}.onnx"
        if name == "norms":
            with pytest.raises(variants.NothingFused, match="fused nothing but norms"):
                variants.build("fp32-opt", fast, built, config)
            assert not built.exists()
        else:
            variants.build("fp32-opt", fast, built, config)
            assert built.is_file()
