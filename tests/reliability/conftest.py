"""Reliability test fixtures: the shared tiny bundle (tests.helpers.serving), a real server process on it,
and the example budget of the fuzzing tests.

ATTNSERVE_RELIABILITY_FULL=1 (`make reliability`) runs the full budgets; CI runs the smaller ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.process import launch, stop, wait_ready
from tests.helpers.serving import assert_error, bundle_dir, serving, tiny_paths

__all__ = ["assert_error", "bundle_dir", "serving", "tiny_paths", "FULL"]

FULL = os.environ.get("ATTNSERVE_RELIABILITY_FULL") == "1"


@pytest.fixture(scope="session")
def live_server(bundle_dir: Path) -> Iterator[str]:
    """A real `python -m attnserve serve` on 127.0.0.1 (uvicorn, httptools); its base URL."""
    proc, url = launch(bundle_dir)
    if not wait_ready(proc, url):
        _, log = stop(proc)
        pytest.fail(f"server did not become ready:\n{log}")
    yield url
    status, log = stop(proc)
    assert status == 0, log
