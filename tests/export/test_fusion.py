"""The default export: exact, fused as far as onnxruntime's optimiser fuses, batch-invariant and timed."""

from __future__ import annotations

import collections
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bundle.feeds import input_names, pad
from bundle.manifest import Manifest
from export.cli import parser
from export.fusion import expand_position_ids

LAYERS = 2  # tests.helpers.tiny


@pytest.fixture(scope="module")
def default_export(cli_bundle: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    """The tiny model exported with the default variants, by `attnserve export` (tests/fixtures.py)."""
    out, done = cli_bundle
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_the_default_variants_are_the_exact_ones(default_export: Path) -> None:
    manifest = Manifest.read(default_export)
    assert {(g.kind, g.variant) for g in manifest.graphs} == {("fast", "fp32"), ("fast", "fp32-opt"),
                                                               ("attention", "fp32")}
    assert parser("attnserve export").parse_args(["src", "--out", "b"]).variants == "fp32,fp32-opt"
    fused = manifest.graph("fast", "fp32-opt")
    diffs = [v for k, v in fused.parity.items() if k.endswith("_diff")] if fused is not None else [1.0]
    assert max(diffs) <= 1e-5  # the house target for served fp32 numbers


def test_both_exact_graphs_are_measured_and_batch_invariant(default_export: Path) -> None:
    """What variant=auto chooses by: figures for fp32 and fp32-opt at every speed shape."""
    manifest = Manifest.read(default_export)
    for variant in ("fp32", "fp32-opt"):
        figures = manifest.graph("fast", variant).measured["cpu"]  # type: ignore[union-attr]
        assert figures.batch_invariant and set(figures.ms_per_batch) == {"32x64", "32x16", "8x64"}, variant


def test_the_fused_graph_has_one_op_per_layer_part(default_export: Path) -> None:
    """Embeddings, attention, both residual layer norms and the feed-forward GELU are each one fused op;
    no head-splitting Reshape/Transpose or Softmax is left."""
    nodes = onnx.load(str(default_export / "fast-fp32-opt.onnx")).graph.node
    ops = collections.Counter(n.op_type for n in nodes)
    assert ops["EmbedLayerNormalization"] == 1 and ops["Attention"] == LAYERS and ops["BiasGelu"] == LAYERS
    assert ops["SkipLayerNormalization"] == 2 * LAYERS
    assert not {"Transpose", "Reshape", "Softmax", "LayerNormalization", "Gelu"} & set(ops), ops


def test_position_ids_rewrite_is_value_for_value(tiny_bundle: Path, tmp_path: Path) -> None:
    """Run with every onnxruntime optimisation off, the rewritten graph gives the same bits."""
    model = onnx.load(str(tiny_bundle / "fast-fp32.onnx"))
    assert expand_position_ids(model) == 1 and expand_position_ids(model) == 0  # nothing left to rewrite
    onnx.save(model, str(tmp_path / "rewritten.onnx"))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before, after = (ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                     for path in (tiny_bundle / "fast-fp32.onnx", tmp_path / "rewritten.onnx"))
    rng = np.random.default_rng(0)
    feed = pad([rng.integers(5, 100, n) for n in (3, 17, 64)], 0, input_names(before))  # (B, T) with padding
    for want, got in zip(before.run(None, feed), after.run(None, feed), strict=True):
        assert np.array_equal(want, got)


def test_bench_fusion_prints_the_side_by_side_table(default_export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.fusion import main

    assert main([str(default_export), "--shapes", "2x8,1x200", "--rounds", "1"]) == 0
    header, _, *lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines}
    assert "CPU ms 2x8 | CPU ms 1x64 |" in header  # T cut to the tiny model's 64 positions
    assert list(rows) == ["fp32", "fp32-opt", "ort-optimizer(fp32)"]
    assert "EmbedLayerNormalization 1" in rows["fp32-opt"]
    assert all(line.count("|") == 7 for line in rows.values())  # graph, nodes, ops, 2 shapes, x best
