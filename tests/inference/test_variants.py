"""Provider and variant choice (inference.runtime.variants): pure functions of what onnxruntime offers and what the
manifest lists. The GPU-marked test (tests/service/test_gpu.py) checks the same policy on a real CUDA host."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle.manifest import Manifest, Measured
from inference.errors import StartupError
from inference.runtime.variants import VariantChoice, choose_attention_variant, choose_provider, choose_variant

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


@pytest.mark.parametrize(("requested", "available", "expected"), [
    ("auto", [CPU], "cpu"), ("auto", [CUDA, CPU], "cuda"), ("cpu", [CUDA, CPU], "cpu"), ("cuda", [CUDA, CPU], "cuda"),
])
def test_choose_provider(requested, available, expected):
    assert choose_provider(requested, available) == expected


def test_explicit_cuda_without_cuda_is_refused():
    with pytest.raises(StartupError, match="cuda"):
        choose_provider("cuda", [CPU])


def manifest_with(tiny_bundle: Path, graphs: list[tuple]) -> Manifest:
    """The tiny bundle's manifest with `graphs`: (kind, variant, providers[, {provider: Measured}])."""
    base = Manifest.read(tiny_bundle)
    template = base.graphs[0]
    entries = [template.model_copy(update={
        "kind": g[0], "variant": g[1], "providers": g[2], "file": f"{g[0]}-{g[1]}.onnx",
        "measured": g[3] if len(g) > 3 else {}}) for g in graphs]
    return base.model_copy(update={"graphs": entries})


def figures(ms_128: float, ms_16: float, diff: float = 0.0, clock: str = "process_cpu") -> Measured:
    return Measured(batch_max_abs_diff=diff, ms_per_batch={"32x128": ms_128, "32x16": ms_16}, clock=clock)


def measured_bundle(tiny_bundle: Path) -> Manifest:
    """Export's figures as they come out on CPU and CUDA hosts: int8-dynamic fastest but batch-dependent, int8
    next, then the exact fp32-opt and fp32; fp16 fastest on CUDA."""
    return manifest_with(tiny_bundle, [
        ("fast", "fp32", [CUDA, CPU], {"cpu": figures(1000, 100), "cuda": figures(40, 5, clock="wall")}),
        ("fast", "fp32-opt", [CPU], {"cpu": figures(930, 95, diff=3e-7)}),
        ("fast", "int8", [CPU], {"cpu": figures(520, 48, diff=4e-7)}),
        ("fast", "int8-dynamic", [CPU], {"cpu": figures(480, 40, diff=3.5e-4)}),
        ("fast", "fp16", [CUDA], {"cuda": figures(20, 4, diff=2e-6, clock="wall")}),
        ("attention", "fp32", [CUDA, CPU]),
    ])


def test_auto_serves_the_fastest_exact_batch_invariant_variant(tiny_bundle):
    every = measured_bundle(tiny_bundle)
    choice = choose_variant("auto", "cpu", every)
    assert choice.variant == "fp32-opt"
    assert choice.reason.startswith("fastest batch-invariant variant measured at export on cpu: fp32-opt 930/95 ms "
                                    "per 32x128/32x16 batch (1.08x/1.05x fp32, process cpu time)")
    assert "int8 (approximate; ATTNSERVE_ALLOW_APPROXIMATE=false)" in choice.reason
    slower = every.model_copy(update={"graphs": [
        g.model_copy(update={"measured": {"cpu": figures(1200, 120)}}) if g.variant == "fp32-opt" else g
        for g in every.graphs]})
    assert choose_variant("auto", "cpu", slower).variant == "fp32"  # measured speed, not a fixed order


def test_approximate_variants_only_when_allowed(tiny_bundle):
    every = measured_bundle(tiny_bundle)
    allowed = choose_variant("auto", "cpu", every, allow_approximate=True)
    assert allowed.variant == "int8" and "(1.92x/2.08x fp32, process cpu time)" in allowed.reason
    assert "int8-dynamic (not batch-invariant (0.00035))" in allowed.reason
    assert choose_variant("auto", "cuda", every).variant == "fp32"
    assert choose_variant("auto", "cuda", every, allow_approximate=True).variant == "fp16"
    assert choose_attention_variant("int8", "cpu", every) == "fp32"


def test_a_batch_dependent_variant_is_served_only_by_name(tiny_bundle):
    every = measured_bundle(tiny_bundle)
    for allow in (True, False):
        assert choose_variant("auto", "cpu", every, allow).variant != "int8-dynamic"
    named = choose_variant("int8-dynamic", "cpu", every)
    assert named.variant == "int8-dynamic" and "NOT batch-invariant" in named.reason
    assert choose_variant("fp32", "cpu", every).reason == "asked for by name; batch-invariant"
    only_dynamic = manifest_with(tiny_bundle, [("fast", "fp32", [CPU], {"cpu": figures(1000, 100, diff=2e-7)}),
                                               ("fast", "int8-dynamic", [CPU], {"cpu": figures(10, 1, diff=1e-3)})])
    assert choose_variant("auto", "cpu", only_dynamic, allow_approximate=True).variant == "fp32"


def test_a_bundle_exported_on_cpu_serves_fp32_on_cuda(tiny_bundle):
    """The GPU story: figures are per provider, and a bundle exported on a CPU host has none for CUDA, so auto
    serves the reference fp32 there (on CUDA) and says why; fp16 only by name."""
    cpu_only = manifest_with(tiny_bundle, [
        ("fast", "fp32", [CUDA, CPU], {"cpu": figures(1000, 100)}),
        ("fast", "fp32-opt", [CPU], {"cpu": figures(930, 95)}),
        ("fast", "fp16", [CUDA], {"cpu": figures(2000, 200, diff=2e-6)}),  # gated on CPU: no CUDA figures
    ])
    for allow in (False, True):
        choice = choose_variant("auto", "cuda", cpu_only, allow_approximate=allow)
        assert choice.variant == "fp32"
        assert choice.reason == ("no batch-invariant variant with export-time speed figures on cuda in this bundle; "
                                 "fp32 is the reference graph")
    assert choose_variant("fp16", "cuda", cpu_only).variant == "fp16"


def test_a_bundle_with_one_fast_graph_serves_it_untimed(tiny_bundle):
    """Export times only graphs it has to choose between (export.measure): one fast graph for the provider has its
    invariance figure and no times, and auto serves it, saying why; a batch-dependent one is still left out."""
    untimed = Measured(batch_max_abs_diff=0.0)
    one = manifest_with(tiny_bundle, [("fast", "fp32", [CUDA, CPU], {"cpu": untimed})])
    choice = choose_variant("auto", "cpu", one)
    assert choice == VariantChoice("fp32", "the one fast graph for cpu in this bundle, batch-invariant")
    moving = manifest_with(tiny_bundle, [("fast", "fp32", [CUDA, CPU], {"cpu": Measured(batch_max_abs_diff=1e-3)})])
    assert "no batch-invariant variant" in choose_variant("auto", "cpu", moving).reason


def test_choose_variant_without_figures_and_missing_variants(tiny_bundle):
    plain = manifest_with(tiny_bundle, [("fast", "fp32", [CUDA, CPU]), ("fast", "int8", [CPU])])  # schema 1
    choice = choose_variant("auto", "cpu", plain)
    assert choice.variant == "fp32" and "no batch-invariant variant with export-time speed figures" in choice.reason
    assert "not measured" in choose_variant("int8", "cpu", plain).reason
    assert choose_attention_variant("fp32", "cpu", plain) is None
    with pytest.raises(StartupError, match="fp32-opt"):
        choose_variant("fp32-opt", "cpu", plain)
    with pytest.raises(StartupError, match="fp16"):
        choose_variant("fp16", "cpu", measured_bundle(tiny_bundle))  # built for CUDA only
