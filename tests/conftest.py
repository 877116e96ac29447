"""Shared pytest configuration.

Fixtures every package uses live in tests/fixtures.py (a plugin, so no test imports a conftest).
Tests marked `gpu` skip where onnxruntime offers no CUDAExecutionProvider. Tests marked
`default_model` need the real MiniLM weights and the Rotten Tomatoes data that `make install`
puts into the virtual environment; they fail (not skip) when those are missing, since CI installs them.
Every test must leave the process's SIGTERM and SIGINT handlers as it found them (signal_handlers_kept).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures"]


@pytest.fixture(scope="session", autouse=True)
def short_speed_figures() -> Iterator[None]:
    """Exports made by the tests time each speed shape over SPEED_ROUNDS (5) rounds instead of stretching short
    batches to SPEED_SECONDS_PER_SHAPE (up to 25 rounds): the tests read that the figures are there, none compares
    them with a limit, and the rounds were about half a minute of the suite. `attnserve export` is unchanged."""
    from export import measure

    kept, measure.SPEED_SECONDS_PER_SHAPE = measure.SPEED_SECONDS_PER_SHAPE, 0.0
    yield
    measure.SPEED_SECONDS_PER_SHAPE = kept


@pytest.fixture(autouse=True)
def signal_handlers_kept() -> Iterator[None]:
    """A command run in-process (jobs.cli.main) must not leave its handler in the pytest process: a later SIGTERM
    to the run then fires it inside an unrelated test (jobs.cli's once raised its Stopped in a fuzz test). Puts
    back what the test changed, then fails it, so a leak is named where it happens and goes no further."""
    watched = (signal.SIGTERM, signal.SIGINT)
    before = {signum: signal.getsignal(signum) for signum in watched}
    yield
    changed = [signum for signum in watched if signal.getsignal(signum) != before[signum]]
    for signum in changed:
        signal.signal(signum, before[signum] if before[signum] is not None else signal.SIG_DFL)
    assert not changed, f"the test left its own {', '.join(s.name for s in changed)} handler installed"


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
