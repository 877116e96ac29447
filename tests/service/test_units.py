"""Pure pieces: provider and variant choice, settings, CLI flags, numpy post-processing, no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bundle.manifest import Manifest, Measured
from service import postprocess
from service.cli import read_settings
from service.runtime import StartupError, choose_attention_variant, choose_provider, choose_variant
from service.settings import Settings

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
    """Export's figures as they come out on CPU: int8-dynamic fastest but batch-dependent, int8 next."""
    return manifest_with(tiny_bundle, [
        ("fast", "fp32", [CUDA, CPU], {"cpu": figures(1000, 100), "cuda": figures(40, 5, clock="wall")}),
        ("fast", "fp32-opt", [CPU], {"cpu": figures(930, 95, diff=3e-7)}),
        ("fast", "int8", [CPU], {"cpu": figures(520, 48, diff=4e-7)}),
        ("fast", "int8-dynamic", [CPU], {"cpu": figures(480, 40, diff=3.5e-4)}),
        ("fast", "fp16", [CUDA], {"cuda": figures(20, 4, diff=2e-3, clock="wall")}),
        ("attention", "fp32", [CUDA, CPU]),
    ])


def test_auto_serves_the_fastest_batch_invariant_variant_by_the_manifest_figures(tiny_bundle):
    every = measured_bundle(tiny_bundle)
    choice = choose_variant("auto", "cpu", every)
    assert choice.variant == "int8"
    assert choice.reason.startswith("fastest batch-invariant variant measured at export on cpu: int8 520/48 ms "
                                    "per 32x128/32x16 batch (1.92x/2.08x fp32, process cpu time)")
    assert "then fp32-opt 930/95 ms, fp32 1000/100 ms" in choice.reason
    assert "int8-dynamic (not batch-invariant (0.00035))" in choice.reason
    slower = every.model_copy(update={"graphs": [
        g.model_copy(update={"measured": {"cpu": figures(1200, 120)}}) if g.variant == "int8" else g
        for g in every.graphs]})
    assert choose_variant("auto", "cpu", slower).variant == "fp32-opt"  # measured speed, not a fixed order
    assert choose_variant("auto", "cpu", every, allow_int8=False).variant == "fp32-opt"
    assert "int8 (ATTNSERVE_ALLOW_INT8=false)" in choose_variant("auto", "cpu", every, allow_int8=False).reason
    assert choose_variant("auto", "cuda", every).variant == "fp32"  # fp16 measured batch-dependent on CUDA
    assert choose_attention_variant("int8", "cpu", every) == "fp32"


def test_a_batch_dependent_variant_is_served_only_by_name(tiny_bundle):
    every = measured_bundle(tiny_bundle)
    for allow_int8 in (True, False):
        assert choose_variant("auto", "cpu", every, allow_int8).variant != "int8-dynamic"
    named = choose_variant("int8-dynamic", "cpu", every)
    assert named.variant == "int8-dynamic" and "NOT batch-invariant" in named.reason
    assert choose_variant("fp32", "cpu", every).reason == "asked for by name; batch-invariant"
    only_dynamic = manifest_with(tiny_bundle, [("fast", "fp32", [CPU], {"cpu": figures(1000, 100, diff=2e-7)}),
                                               ("fast", "int8-dynamic", [CPU], {"cpu": figures(10, 1, diff=1e-3)})])
    assert choose_variant("auto", "cpu", only_dynamic).variant == "fp32"


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


def test_settings_from_environment_and_validation(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_BUNDLE", str(tmp_path))
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("ATTNSERVE_CORS_ORIGINS", "http://a.example, http://b.example")
    monkeypatch.setenv("ATTNSERVE_API_KEY", "zz-secret-zz")
    settings = Settings()
    assert settings.max_batch_size == 8 and settings.bundle_dir == tmp_path
    assert settings.cors_origins == ["http://a.example", "http://b.example"]
    assert "zz-secret-zz" not in repr(settings)
    with pytest.raises(ValidationError):
        Settings(max_batch_size=0)
    with pytest.raises(ValidationError):
        Settings(provider="tpu")
    for name, field in Settings.model_fields.items():
        assert field.description, name


def test_cli_flags_override_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_PORT", "9000")
    settings = read_settings(["--bundle", str(tmp_path), "--port", "9100", "--no-truncate", "--variant", "fp32"],
                             "attnserve serve")
    assert settings.port == 9100 and settings.truncate is False and settings.variant == "fp32"


def test_postprocess_embeddings_and_softmax():
    vectors = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    np.testing.assert_allclose(postprocess.embeddings(vectors, True, None), [[3 / 13, 4 / 13, 12 / 13]], rtol=1e-6)
    np.testing.assert_allclose(postprocess.embeddings(vectors, False, 2), [[0.6, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(postprocess.softmax(np.array([[0.0, np.log(3)]])), [[0.25, 0.75]])
    ranked = postprocess.top_labels(np.array([[0.1, 0.7, 0.2]]), ["a", "b", "c"], 2)
    assert [r["label"] for r in ranked[0]] == ["b", "c"]


def test_rollout_of_identity_attention_is_identity_and_rows_sum_to_one():
    eye = np.broadcast_to(np.eye(4), (3, 2, 4, 4))  # (l, h, n, n)
    np.testing.assert_allclose(postprocess.rollout(eye), np.eye(4), atol=1e-6)
    rng = np.random.default_rng(0)
    maps = rng.random((3, 2, 5, 5))
    maps /= maps.sum(-1, keepdims=True)
    np.testing.assert_allclose(postprocess.rollout(maps).sum(-1), 1, atol=1e-5)


def test_attention_size_estimate_bounds_the_real_bytes():
    values = np.random.default_rng(0).random((2, 2, 9, 9)).astype(np.float32)
    import orjson

    assert len(orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)) <= postprocess.estimated_bytes(
        values.size, "float", "float32")
    assert len(postprocess.encode_array(values, "base64", "float16")) == postprocess.estimated_bytes(
        values.size, "base64", "float16")


def test_service_and_bundle_import_neither_torch_nor_model_nor_export(tiny_bundle):
    """Every module of service/, bundle/ and jobs/ imported, a bundle loaded and an app built, in a fresh process:
    torch, model/ and export/ stay out of sys.modules (the Docker image carries neither)."""
    code = (
        "import pkgutil, importlib, sys\n"
        "import bundle, jobs, service\n"
        "for package in (bundle, service, jobs):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "from service.app import create_app\n"
        "from service.runtime import load_runtime\n"
        "from service.settings import Settings\n"
        f"runtime = load_runtime(Settings(bundle={str(tiny_bundle)!r}))\n"
        "create_app(Settings(bundle='x'), runtime)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'model', 'export'))\n"
        "assert not loaded, loaded\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_json_log_lines():
    import json
    import logging

    from service.logs import JsonFormatter

    record = logging.LogRecord("attnserve", logging.ERROR, __file__, 1, "cannot start: %s", ("bad",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "error" and entry["message"] == "cannot start: bad" and entry["time"].endswith("Z")


def test_service_readme_documents_every_setting():
    readme = (Path(__file__).resolve().parents[2] / "service" / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"`ATTNSERVE_{name.upper()}`" in readme, name


def test_graceful_drain_is_never_rounded_down_to_none():
    from service.cli import drain_seconds

    assert [drain_seconds(Settings(bundle="b", graceful_timeout_s=s)) for s in (0.5, 1.0, 8.2)] == [1, 1, 9]
