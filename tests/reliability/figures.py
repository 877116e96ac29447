"""Measured figures next to their limits, for the limit checks that `make reliability` runs.

A limit check (a test marked `reliability`) records every figure it measures with `Figures.limit` (value,
comparison, limit, unit) or `Figures.note` (context without a limit: S, rates, status counts), then calls
`assert_met()`, which fails the test when any limit was missed. tests/reliability/conftest.py prints every
check's table at the end of the run, passed or failed, so the figures are read next to their limits.

These checks measure wall-clock latency and throughput, which on a shared machine depend on the other jobs
as much as on the code; `make test` (CI) deselects them (`-m "not reliability"` in pyproject's addopts) and
asserts only what the code decides. Deselected is not passed: pytest reports them as "deselected".

Each table ends with the host's steal during the check: the share of CPU time the hypervisor gave to other
machines (/proc/stat), so that a slow run on a busy host is told apart from a slow change.

ATTNSERVE_RELIABILITY_SCALE (default 1) multiplies every duration, for a quick look while developing; a
table run at another scale says so in its title, and its figures are not the documented ones.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from dataclasses import dataclass, field

SCALE = float(os.environ.get("ATTNSERVE_RELIABILITY_SCALE", "1"))
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq,
}


def cpu_times() -> tuple[int, int]:
    """All CPUs' (steal, total) time since boot in clock ticks, from /proc/stat's first line; (0, 0) without one."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return 0, 0
    return (ticks[7], sum(ticks)) if len(ticks) == 8 else (0, 0)


def scaled(seconds: float, floor_s: float = 1.0) -> float:
    """A documented duration times ATTNSERVE_RELIABILITY_SCALE, at least `floor_s`."""
    return max(floor_s, seconds * SCALE)


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    op: str
    limit: float
    unit: str

    @property
    def met(self) -> bool:
        return _OPS[self.op](self.value, self.limit)

    def row(self) -> str:
        value, limit = f"{_number(self.value)} {self.unit}", f"{self.op} {_number(self.limit, '')} {self.unit}"
        return f"  {self.name:<44} {value:>14} {limit:>16}   {'met' if self.met else 'MISSED'}"


def _number(x: float, alternate: str = "#") -> str:
    """Counts in full (10,125), measurements to four significant digits (107.1, 2.000; limits 0.8, not 0.8000)."""
    return f"{x:,.0f}" if x.is_integer() and abs(x) < 1e12 else f"{x:{alternate},.4g}"


@dataclass
class Figures:
    check: str
    rows: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: tuple[int, int] = field(default_factory=cpu_times)

    def limit(self, name: str, value: float, op: str, limit: float, unit: str = "") -> None:
        self.rows.append(Figure(name, float(value), op, float(limit), unit))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def note_steal(self) -> None:
        """The host's steal during the check, and since boot for comparison (no note where /proc/stat is absent)."""
        (steal, total), (steal_0, total_0) = cpu_times(), self.started
        if total > total_0 and total_0:
            self.note(f"host steal during the check: {(steal - steal_0) / (total - total_0):.1%} of CPU time "
                      f"(since boot: {steal / total:.1%})")

    def missed(self) -> list[Figure]:
        return [f for f in self.rows if not f.met]

    def table(self) -> str:
        scale = "" if SCALE == 1 else f" [durations x {SCALE:g}: not the documented run]"
        head = f"  {'figure':<44} {'value':>14} {'limit':>16}   verdict"
        return "\n".join([f"{self.check}{scale}", head, *(f.row() for f in self.rows),
                          *(f"  - {n}" for n in self.notes)])

    def assert_met(self) -> None:
        missed = ", ".join(f.name for f in self.missed())
        assert not missed, f"limits missed: {missed}\n{self.table()}"
