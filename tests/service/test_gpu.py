"""On a CUDA host, the serving policy of inference/runtime/variants.py (the unit tests in
tests/inference/test_variants.py
check the same choices as pure functions): `auto` serves an exact graph on CUDA, fp32 for a bundle whose
figures were measured elsewhere, and fp16 only when named; CUDA's fp32 answers equal the CPU's closely."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from bundle.manifest import Manifest
from tests.helpers.process import running
from tests.service.test_integration import TEXTS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def fp16_bundle(tiny_checkpoint, tmp_path_factory):
    from export.bundle import export_bundle

    out = tmp_path_factory.mktemp("gpu") / "bundle"
    export_bundle(tiny_checkpoint, out, variants=("fp32", "fp16"))
    return out


def _served(url: str) -> tuple[dict, np.ndarray]:
    info = httpx.get(f"{url}/info").json()
    return info, np.array(httpx.post(f"{url}/embed", json={"inputs": TEXTS}).json())


def test_auto_serves_exact_fp32_on_cuda_and_fp16_only_by_name(fp16_bundle, tmp_path):
    measured_on_cuda = "cuda" in Manifest.read(fp16_bundle).graph("fast", "fp32").measured  # type: ignore[union-attr]
    with running(fp16_bundle, tmp_path / "auto.log") as server:
        info, auto = _served(server.url)
    assert info["provider"] == "cuda" and info["variants"]["fast"] == "fp32"
    if not measured_on_cuda:
        assert info["variant"]["reason"].startswith("no batch-invariant variant with export-time speed figures on cuda")
    with running(fp16_bundle, tmp_path / "fp16.log", "--variant", "fp16") as server:
        info, half = _served(server.url)
    assert info["provider"] == "cuda" and info["variants"]["fast"] == "fp16"
    with running(fp16_bundle, tmp_path / "cpu.log", "--provider", "cpu") as server:
        info, cpu = _served(server.url)
    assert info["variants"]["fast"] == "fp32"
    assert np.abs(auto - cpu).max() < 1e-3  # fp32 on CUDA (its matmuls may use TF32) against the CPU's
    assert np.abs(half - cpu).max() < 1e-2
