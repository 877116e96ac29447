"""The limit checks' tables (tests.reliability.figures): verdicts, and the host's steal noted at the end."""

from __future__ import annotations

from tests.reliability.figures import Figures, cpu_times


def test_a_missed_limit_says_missed_and_fails_the_check() -> None:
    figures = Figures("check")
    figures.limit("p99", 12.5, "<=", 10, "ms")
    figures.limit("shares", 0.5, ">=", 0.4)
    assert [f.name for f in figures.missed()] == ["p99"]
    assert "MISSED" in figures.table().splitlines()[2] and figures.table().splitlines()[3].endswith("met")


def test_the_hosts_steal_is_read_from_proc_stat_and_noted_as_a_share_of_the_checks_cpu_time() -> None:
    steal, total = cpu_times()
    assert 0 <= steal <= total and total > 0  # Linux: the tests run only there
    figures = Figures("check", started=(steal, total - 1000))
    figures.note_steal()
    assert len(figures.notes) == 1 and figures.notes[0].startswith("host steal during the check: ")
    unknown = Figures("check", started=(0, 0))  # /proc/stat could not be read when the check began
    unknown.note_steal()
    assert unknown.notes == []
