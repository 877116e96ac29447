"""On a CUDA host: `auto` serves on CUDA with the fp16 graph, and its embeddings match the CPU fp32 ones."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.helpers.process import running
from tests.service.test_integration import TEXTS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def fp16_bundle(tiny_checkpoint, tmp_path_factory):
    from export.bundle import export_bundle

    out = tmp_path_factory.mktemp("gpu") / "bundle"
    export_bundle(tiny_checkpoint, out, variants=("fp32", "fp16"))
    return out


def test_auto_serves_fp16_on_cuda_close_to_cpu_fp32(fp16_bundle, tmp_path):
    with running(fp16_bundle, tmp_path / "auto.log") as server:
        info = httpx.get(f"{server.url}/info").json()
        assert info["provider"] == "cuda" and info["variants"]["fast"] == "fp16"
        on_gpu = np.array(httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}).json())
    with running(fp16_bundle, tmp_path / "cpu.log", "--provider", "cpu") as server:
        assert httpx.get(f"{server.url}/info").json()["variants"]["fast"] == "fp32"
        on_cpu = np.array(httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}).json())
    assert np.abs(on_gpu - on_cpu).max() < 1e-2
