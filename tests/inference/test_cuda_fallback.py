"""CUDA offered but not usable, as onnxruntime-gpu is on a host or container without a GPU: provider auto serves on
CPU and says why in one log line; provider cuda refuses to start with the same reason. Runs without a GPU: the
CPU build of onnxruntime is made to offer CUDA, and its session then runs on CPU, which is the fallback path."""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort
import pytest

from bundle.session import cuda_unavailable_reason
from inference.errors import StartupError
from inference.options import LoadOptions
from inference.runtime.loading import load_bundle

# The CPU build warns that it has no CUDA provider, then opens the session on CPU.
pytestmark = pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available")


@pytest.fixture
def cuda_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime really offers CUDA")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])


@pytest.mark.usefixtures("cuda_offered")
def test_auto_falls_back_to_cpu_with_one_line_saying_why(tiny_bundle: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inference.runtime.loading"):
        loaded = load_bundle(tiny_bundle, LoadOptions(provider="auto"))
    assert loaded.provider == "cpu"
    lines = [r.getMessage() for r in caplog.records if "serving on CPU" in r.getMessage()]
    assert len(lines) == 1
    assert cuda_unavailable_reason() in lines[0] and "did not run on" in lines[0]


@pytest.mark.usefixtures("cuda_offered")
def test_explicit_cuda_refuses_with_the_reason(tiny_bundle: Path) -> None:
    with pytest.raises(StartupError, match="did not run on CUDA") as error:
        load_bundle(tiny_bundle, LoadOptions(provider="cuda"))
    assert cuda_unavailable_reason() in str(error.value)
