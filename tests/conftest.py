"""Shared pytest configuration.

Fixtures every package uses live in tests/fixtures.py (a plugin, so no test imports a conftest).
Tests marked `gpu` skip where onnxruntime offers no CUDAExecutionProvider. Tests marked
`default_model` need the real MiniLM weights and the Rotten Tomatoes data that `make install`
puts into the virtual environment; they fail (not skip) when those are missing, since CI installs them.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures"]


def _cuda_available() -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    return "CUDAExecutionProvider" in ort.get_available_providers()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="onnxruntime has no CUDAExecutionProvider on this machine")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not any keyword or parameter id "gpu"
            item.add_marker(skip_gpu)
