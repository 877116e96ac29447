"""Open-loop load against a real server: a fixed send schedule whatever the responses, a client-side ledger
of every request (sent, answered by status, transport errors), latency percentiles, and the short ramp
that finds S, the sustainable rate of this run.

Every loop here is bounded in count and in time: a schedule of `rate x duration` requests, each with a
client timeout, and a final wait that gives up after `duration + timeout`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from bench.httpclient import TRANSPORT_ERRORS, Client, quiet_heap
from tests.helpers.tiny import SENTENCES

Request = tuple[str, dict[str, Any]]  # (path, JSON body)
TRANSPORT_ERROR = 0  # the status recorded when no HTTP answer came back
MIXED_SIZES = (1, 4, 16, 32)  # inputs per request, cycled: batching and refusal costs both show


def mixed_requests(sizes: Sequence[int] = MIXED_SIZES) -> Callable[[int], Request]:
    """Request i: /embed with sizes[i % len] inputs of mixed lengths (one sentence up to four joined)."""

    def make(i: int) -> Request:
        n = sizes[i % len(sizes)]
        texts = [" ".join(SENTENCES[(i + j + k) % len(SENTENCES)] for k in range(1 + (i + j) % 4)) for j in range(n)]
        return "/embed", {"inputs": texts}

    return make


@dataclass
class Ledger:
    """One row per answered request: (sent at, seconds after the start; status, 0 = transport error; latency)."""

    sent: int = 0
    rows: list[tuple[float, int, float]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0
    started: float = 0.0  # time.perf_counter() of the first send
    gc_pauses: list[tuple[int, float]] = field(default_factory=list)  # this client's collections: (generation, s)

    @property
    def answered(self) -> int:
        return len(self.rows)

    def by_status(self) -> Counter[int]:
        return Counter(status for _, status, _ in self.rows)

    def latencies(self, status: int | None = 200, since: float = 0.0, until: float = float("inf")) -> np.ndarray:
        return np.array([lat for at, s, lat in self.rows if status in (None, s) and since <= at < until])

    def p99(self, status: int | None = 200, since: float = 0.0, until: float = float("inf")) -> float:
        values = self.latencies(status, since, until)
        return float(np.percentile(values, 99)) if values.size else float("nan")

    def goodput(self) -> float:
        """200s per second of the schedule."""
        return self.by_status()[200] / self.duration_s

    def summary(self) -> str:
        longest = max((s for _, s in self.gc_pauses), default=0.0)
        return (f"sent {self.sent} answered {self.answered} by status {dict(self.by_status())} "
                f"p99(200) {self.p99() * 1000:.1f} ms errors {dict(self.errors)}; client collections "
                f"{len(self.gc_pauses)}, longest {longest * 1000:.1f} ms")


async def _one(http: Client, request: Request, ledger: Ledger, sent_at: float = 0.0) -> None:
    path, body = request
    started = time.perf_counter()
    try:
        status, _ = await http.post(path, orjson.dumps(body))
    except TRANSPORT_ERRORS as error:
        status = TRANSPORT_ERROR  # every failure to get an answer is a transport error
        ledger.errors[type(error).__name__] += 1
    ledger.rows.append((sent_at, status, time.perf_counter() - started))


async def open_loop(
    url: str, rate: float, duration_s: float, make: Callable[[int], Request], *, timeout_s: float = 30,
) -> Ledger:
    """Send request i at start + i / rate for `duration_s`, whatever the answers; wait for every answer."""
    ledger, count = Ledger(duration_s=duration_s), int(rate * duration_s)
    http = Client(url, timeout_s)
    with quiet_heap(ledger.gc_pauses):
        await _schedule(http, rate, count, make, ledger, timeout_s)
    return ledger


async def _schedule(http: Client, rate: float, count: int, make: Callable[[int], Request], ledger: Ledger,
                    timeout_s: float) -> None:
    """Only the requests in flight are held: a list of every task sent grew the client's heap through a run
    (34,000 tasks in a 600 s soak at 57 req/s), and a full collection of it paused the client for 86 ms, so the
    requests due meanwhile reached the server at once, on new connections (a soak that missed its fds limit)."""
    in_flight: set[asyncio.Task[None]] = set()
    try:
        ledger.started = start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(_one(http, make(i), ledger, time.perf_counter() - start))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            ledger.sent += 1
        if in_flight:
            await asyncio.wait(in_flight, timeout=timeout_s + 5)
    finally:
        for task in list(in_flight):
            task.cancel()
        await http.aclose()


async def unloaded_p99(url: str, make: Callable[[int], Request], count: int = 60, pause_s: float = 0.1) -> float:
    """p99 latency of `count` requests sent one at a time (nothing else in flight), `pause_s` apart.

    The pause keeps the server as idle between requests as the ramp's first step (10/s) does: sent back
    to back, onnxruntime's threads never go to sleep, and that baseline (7.5-13.6 ms on the tiny model)
    sat under the 10/s step's own p99 (18-25 ms, nothing queued), so the ramp found no rate at all."""
    ledger, http = Ledger(), Client(url)
    try:
        for i in range(count):
            if i:
                await asyncio.sleep(pause_s)
            await _one(http, make(i), ledger)
    finally:
        await http.aclose()
    assert ledger.by_status() == {200: count}, ledger.summary()
    return ledger.p99()


@dataclass
class Ramp:
    sustainable: float
    unloaded_p99: float
    steps: list[tuple[float, float, int]]  # (rate, p99, non-200 answers)


async def find_sustainable_rate(
    url: str, make: Callable[[int], Request], *, step_s: float, start_rate: float = 10, factor: float = 1.5,
    max_steps: int = 12,
) -> Ramp:
    """S: the highest ramp rate whose p99 stays under twice the unloaded p99 with every answer a 200 (a step
    that fails is run once more before the ramp stops)."""
    base = await unloaded_p99(url, make)
    sustainable = 0.0
    steps: list[tuple[float, float, int]] = []
    for rate in itertools.islice((start_rate * factor**k for k in itertools.count()), max_steps):
        if not await _step_holds(url, rate, step_s, make, base, steps) and not await _step_holds(
            url, rate, step_s, make, base, steps,  # a failing step gets one retry: the machine is shared
        ):
            break
        sustainable = rate
    return Ramp(sustainable, base, steps)


async def _step_holds(
    url: str, rate: float, step_s: float, make: Callable[[int], Request], base: float,
    steps: list[tuple[float, float, int]],
) -> bool:
    ledger = await open_loop(url, rate, step_s, make)
    bad = ledger.sent - ledger.by_status()[200]
    steps.append((rate, ledger.p99(), bad))
    await asyncio.sleep(0.5)  # let the server settle between steps
    return not bad and ledger.p99() < 2 * base
