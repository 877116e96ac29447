"""The `figures` fixture of the limit checks (tests.reliability.figures) and the table they print at the end
of the run, whether each check passed or failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.figures import Figures

_RECORDED = pytest.StashKey[list[Figures]]()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    """This check's figures; printed in the "reliability figures" section at the end of the run."""
    recorded = Figures(request.node.nodeid)
    request.config.stash.setdefault(_RECORDED, []).append(recorded)
    yield recorded
    recorded.note_steal()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    recorded = config.stash.get(_RECORDED, [])
    if recorded:
        terminalreporter.section("reliability figures")
        for figures in recorded:
            terminalreporter.write_line(figures.table() + "\n")
