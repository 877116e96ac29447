"""Every variant builds, keeps the graph's outputs, passes its gate and is listed in the manifest with the
batch invariance and speed export measured."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from bundle.manifest import Manifest
from bundle.verify import verify_bundle
from export.parity import CUDA_MEASURED
from export.variants import attention_projections
from model.load import load_model


@pytest.fixture(scope="module")
def all_variants(variants_bundle: Path) -> Manifest:
    """Every variant; int8 calibrated and gated on texts written for the tiny model (tests/fixtures.py)."""
    return verify_bundle(variants_bundle)


def test_all_variants_listed(all_variants: Manifest) -> None:
    listed = {(g.kind, g.variant) for g in all_variants.graphs}
    assert listed == {("fast", v) for v in ("fp32", "fp32-opt", "int8", "int8-dynamic", "fp16")} | {
        ("attention", "fp32"), ("attention", "fp16")}


def test_variant_parity_figures(all_variants: Manifest) -> None:
    opt, int8, fp16 = (all_variants.graph("fast", v) for v in ("fp32-opt", "int8", "fp16"))
    assert opt and int8 and fp16
    assert max(v for k, v in opt.parity.items() if k.endswith("_diff")) <= 1e-5
    assert int8.parity["embeddings_min_cosine"] >= 0.99 and int8.parity["quantized_matmuls"] > 0
    for texts in ("parity", "short", "held_out"):  # each gate set on its own
        assert int8.parity[f"{texts}_embeddings_min_cosine"] >= 0.99 and int8.parity[f"{texts}_label_agreement"] >= 0.99
    assert fp16.parity["embeddings_min_cosine"] >= 0.999
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert fp16.parity[CUDA_MEASURED] == float(cuda)  # measured on CPU here when CUDA is absent


def test_int8_scope_picks_attention_projections(tiny_bundle: Path, tiny_hf_bundle: Path) -> None:
    for bundle in (tiny_bundle, tiny_hf_bundle):  # the HF one has a (D, D) pooler: left out
        manifest = Manifest.read(bundle)
        config = load_model(Path(manifest.source.path)).encoder.config
        graph = bundle / "fast-fp32.onnx"
        assert len(attention_projections(graph, config, ("q", "k", "v", "out"))) == 4 * config.num_layers
        assert len(attention_projections(graph, config, ("q", "k"))) == 2 * config.num_layers


def test_cpu_graphs_carry_their_measured_invariance_and_speed(all_variants: Manifest) -> None:
    for graph in all_variants.graphs:
        if graph.kind != "fast" or "CPUExecutionProvider" not in graph.providers:
            assert "cpu" not in graph.measured, graph.variant  # fp16 is for CUDA; attention is not chosen by speed
            continue
        figures = graph.measured["cpu"]
        assert set(figures.ms_per_batch) == {"32x64", "32x16", "8x64"}  # T cut to the tiny model's 64 tokens
        assert all(ms > 0 for ms in figures.ms_per_batch.values()) and figures.clock == "process_cpu"
        assert figures.batch_invariant == (graph.variant != "int8-dynamic"), (graph.variant, figures)
