"""Pure pieces: provider and variant choice, settings, CLI flags, numpy post-processing, no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bundle.manifest import Manifest
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


def manifest_with(tiny_bundle: Path, graphs: list[tuple[str, str, list[str]]]) -> Manifest:
    base = Manifest.read(tiny_bundle)
    template = base.graphs[0]
    entries = [template.model_copy(update={"kind": k, "variant": v, "providers": p, "file": f"{k}-{v}.onnx"})
               for k, v, p in graphs]
    return base.model_copy(update={"graphs": entries})


def test_choose_variant_fastest_that_the_provider_can_run(tiny_bundle):
    every = manifest_with(tiny_bundle, [("fast", "fp32", [CUDA, CPU]), ("fast", "fp32-opt", [CUDA, CPU]),
                                       ("fast", "int8", [CPU]), ("fast", "fp16", [CUDA]),
                                       ("attention", "fp32", [CUDA, CPU])])
    assert choose_variant("auto", "cuda", every) == "fp16"
    assert choose_variant("auto", "cpu", every) == "int8"
    assert choose_variant("auto", "cpu", every, allow_int8=False) == "fp32-opt"
    assert choose_variant("fp32", "cpu", every) == "fp32"
    assert choose_attention_variant("int8", "cpu", every) == "fp32"
    plain = manifest_with(tiny_bundle, [("fast", "fp32", [CUDA, CPU])])
    assert choose_variant("auto", "cpu", plain) == "fp32"
    assert choose_attention_variant("fp32", "cpu", plain) is None
    with pytest.raises(StartupError, match="int8"):
        choose_variant("int8", "cpu", plain)
    with pytest.raises(StartupError, match="fp16"):
        choose_variant("fp16", "cpu", every)  # built for CUDA only


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
