"""Overload and soak against a real `python -m attnserve serve` process, driven open loop (tests.reliability.load).

S, the sustainable rate, is measured at the start of this run by a short ramp (the highest rate whose p99
stays under twice the unloaded p99 with every answer a 200). Latency limits are ratios to the unloaded p99
of this same run, so a busy machine moves both sides.

Operator settings of the overload server (documented in service/README.md): `--max-queue 32` (at most 32
inputs admitted, so queueing delay stays about one batch and the excess is refused with 429 at once, before
its body is read) and `--queue-timeout-s 2`. The soak runs on a second server with the default settings:
at 0.5xS a burst of 32-input requests can briefly fill a 32-input queue, and the soak is about stability,
not refusals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability import FULL
from tests.reliability.load import (
    TRANSPORT_ERROR,
    Ledger,
    Ramp,
    Server,
    find_sustainable_rate,
    mixed_requests,
    open_loop,
    proc_stats,
    running_server,
    unloaded_p99,
)

SETTINGS = ("--max-queue", "32", "--queue-timeout-s", "2")
DOCUMENTED_5XX = {503, 504}
MAKE = mixed_requests()


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tiny_bundle, tmp_path_factory.mktemp("load") / "server.log", *SETTINGS) as srv:
        yield srv


@pytest.fixture
def soak_server(tiny_bundle: Path, tmp_path: Path) -> Iterator[Server]:
    with running_server(tiny_bundle, tmp_path / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def ramp(server: Server) -> Ramp:
    found = asyncio.run(find_sustainable_rate(server.url, MAKE, step_s=4 if FULL else 2))
    print(f"\nramp: unloaded p99 {found.unloaded_p99 * 1000:.1f} ms, S {found.sustainable:.1f}/s, steps {found.steps}")
    assert found.sustainable > 0, found
    return found


@pytest.mark.slow
async def test_overload_at_four_times_s_refuses_fast_and_keeps_latency(server: Server, ramp: Ramp) -> None:
    """4xS open loop, mixed batch sizes, for 8 s in CI and 60 s in full: no transport errors, no 5xx but
    503/504, some refusals (the load really overloads), refusals are 429 with p99 < 50 ms, accepted p99 <= 3x
    unloaded, goodput >= 0.8xS, every request answered (ledger), and within 5 s after, the server is ready
    and a request's latency is back near unloaded."""
    rate, duration = 4 * ramp.sustainable, 60.0 if FULL else 8.0
    ledger = await open_loop(server.url, rate, duration, MAKE, timeout_s=30)
    statuses = ledger.by_status()
    report = (f"rate {rate:.0f}/s: {ledger.summary()}; goodput {ledger.goodput():.1f}/s (S {ramp.sustainable:.1f}); "
              f"429 p99 {ledger.p99(429) * 1000:.1f} ms; unloaded p99 {ramp.unloaded_p99 * 1000:.1f} ms; "
              f"p99 (ms) of all answers per {duration / 12:g} s window {_window_p99s(ledger, duration, 12)}")
    print("\n" + report)
    assert ledger.answered == ledger.sent and sum(statuses.values()) == ledger.sent, report
    assert statuses[TRANSPORT_ERROR] == 0, report
    assert set(statuses) <= {200, 429} | DOCUMENTED_5XX, report
    assert statuses[429] > 0, report  # 4xS really overloaded it; else this check proves nothing
    assert ledger.p99(429) < 0.050, report
    assert ledger.p99(200) <= 3 * ramp.unloaded_p99, report
    assert ledger.goodput() >= 0.8 * ramp.sustainable, report
    assert await _back_to_normal(server, ramp.unloaded_p99, within_s=5.0), report


def _window_p99s(ledger: Ledger, duration: float, windows: int) -> list[int]:
    """Where the slow answers were: a stall of the shared machine shows as one or two bad windows."""
    width = duration / windows
    return [round(ledger.p99(None, since=k * width, until=(k + 1) * width) * 1000) for k in range(windows)]


async def _back_to_normal(server: Server, unloaded: float, within_s: float) -> bool:
    """True once /ready is 200 and five requests in a row are each under twice the unloaded p99."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            probe = await asyncio.wait_for(unloaded_p99(server.url, MAKE, count=5), deadline - time.monotonic())
        except (AssertionError, TimeoutError):
            probe = float("inf")
        if probe <= 2 * unloaded:
            return True
        await asyncio.sleep(0.25)
    return False


# One scheduler slice of a shared 2-core machine: with p99s of ~10 ms, 1.2x alone is a 2 ms margin, which a
# 45 s CI soak missed once (10.7 -> 14.0 ms) with RSS, threads and fds flat. A slowing service drifts by far more.
SCHEDULER_SLACK_S = 0.005


@pytest.mark.slow
async def test_soak_at_half_s_is_stable(soak_server: Server, ramp: Ramp) -> None:
    """0.5xS open loop, mixed lengths and batch sizes, for 45 s in CI and 10 min in full: from the midpoint on
    RSS grows < 5%, file descriptors and threads stay put, the p99 of the last third <= 1.2x the first third's
    (+ SCHEDULER_SLACK_S), and every request is a 200. Each third's p99 is the best of its three windows
    (`_best_p99`): ten minutes on a shared machine see other jobs come and go, and one busy minute is not a
    service that slows down."""
    rate, duration = 0.5 * ramp.sustainable, 600.0 if FULL else 45.0
    samples: list[tuple[float, dict[str, int]]] = []
    pid = soak_server.proc.pid
    sampler = asyncio.create_task(_sample(pid, samples, every_s=duration / 30, until_s=duration + 5))
    ledger = await open_loop(soak_server.url, rate, duration, MAKE, timeout_s=30)
    sampler.cancel()
    first, last = _best_p99(ledger, 0, duration / 3), _best_p99(ledger, duration - duration / 3, duration)
    mid = [s for at, s in samples if at >= duration / 2]
    report = (f"rate {rate:.1f}/s for {duration:.0f} s: {ledger.summary()}; p99 first third {first * 1000:.1f} ms, "
              f"last third {last * 1000:.1f} ms (best of 3 windows each); "
              f"samples {[(round(at), s) for at, s in samples]}")
    print("\n" + report)
    assert ledger.by_status() == {200: ledger.sent}, report
    assert len(mid) >= 5, report
    assert max(s["rss_kb"] for s in mid) < 1.05 * mid[0]["rss_kb"], report
    assert max(s["threads"] for s in mid) <= max(s["threads"] for _, s in samples[: len(samples) // 2]), report
    assert max(s["fds"] for s in mid) <= max(s["fds"] for _, s in samples[: len(samples) // 2]) + 4, report
    assert last <= 1.2 * first + SCHEDULER_SLACK_S, report


def _best_p99(ledger: Ledger, since: float, until: float, windows: int = 3) -> float:
    """The lowest p99 of `windows` equal windows in [since, until): a service that degrades raises every window,
    while another job on the shared machine raises only the windows it runs in."""
    width = (until - since) / windows
    return min(ledger.p99(since=since + k * width, until=since + (k + 1) * width) for k in range(windows))


async def _sample(pid: int, samples: list[tuple[float, dict[str, int]]], every_s: float, until_s: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < until_s:
        samples.append((time.monotonic() - start, proc_stats(pid)))
        await asyncio.sleep(every_s)
