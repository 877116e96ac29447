"""Open-loop load against a real server: a fixed send schedule whatever the responses, a client-side ledger
of every request (sent, answered by status, transport errors), latency percentiles, and the short ramp
that finds S, the sustainable rate of this run.

Every loop here is bounded in count and in time: a schedule of `rate x duration` requests, each with a
client timeout, and a final wait that gives up after `duration + timeout`.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tests.helpers.process import ROOT, free_port, serve_command, server_env, terminate, wait_ready
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
        return (f"sent {self.sent} answered {self.answered} by status {dict(self.by_status())} "
                f"p99(200) {self.p99() * 1000:.1f} ms errors {dict(self.errors)}")


class RawClient:
    """A minimal HTTP/1.1 client on asyncio streams with keep-alive connections and no connection limit.

    httpx's pool costs about a millisecond of CPU per request; on two shared cores that made the client,
    not the server, the bottleneck of open-loop load (client-side p99 of 10 s while the server measured
    every request under 0.5 s). Connections idle longer than `max_idle_s` (under the server's 5 s
    keep-alive) are closed rather than reused, so a reused connection is never one the server is closing.
    """

    def __init__(self, url: str, timeout_s: float = 30, max_idle_s: float = 2.0) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port, self.timeout_s, self.max_idle_s = host, int(port), timeout_s, max_idle_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """(status, body); raises OSError, asyncio.IncompleteReadError or TimeoutError without an answer."""
        async with asyncio.timeout(self.timeout_s):
            reader, writer = await self._connection()
            try:
                data = orjson.dumps(body)
                writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host.encode(), len(data), data))
                head = await reader.readuntil(b"\r\n\r\n")
                status, length, close = _parse_head(head)
                content = await reader.readexactly(length)
            except BaseException:
                writer.close()
                raise
        if close:
            writer.close()
        else:
            self._idle.append((reader, writer, time.monotonic()))
        return status, content

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer, since = self._idle.pop()
            if time.monotonic() - since < self.max_idle_s and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    async def aclose(self) -> None:
        for _, writer, _ in self._idle:
            writer.close()
        self._idle.clear()


def _parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, whether the server closes the connection) of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    return int(lines[0].split()[1]), int(headers.get("content-length", "0")), headers.get("connection") == "close"


async def _one(http: RawClient, request: Request, ledger: Ledger, sent_at: float = 0.0) -> None:
    started = time.perf_counter()
    try:
        status, _ = await http.post(*request)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as error:
        status = TRANSPORT_ERROR  # every failure to get an answer is a transport error
        ledger.errors[type(error).__name__] += 1
    ledger.rows.append((sent_at, status, time.perf_counter() - started))


async def open_loop(
    url: str, rate: float, duration_s: float, make: Callable[[int], Request], *, timeout_s: float = 30,
) -> Ledger:
    """Send request i at start + i / rate for `duration_s`, whatever the answers; wait for every answer."""
    ledger, count = Ledger(duration_s=duration_s), int(rate * duration_s)
    http = RawClient(url, timeout_s)
    tasks: list[asyncio.Task[None]] = []
    try:
        ledger.started = start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(http, make(i), ledger, time.perf_counter() - start)))
            ledger.sent += 1
        await asyncio.wait(tasks, timeout=timeout_s + 5)
    finally:
        for task in tasks:
            task.cancel()
        await http.aclose()
    return ledger


async def unloaded_p99(url: str, make: Callable[[int], Request], count: int = 60) -> float:
    """p99 latency of `count` requests sent one at a time (nothing else in flight)."""
    ledger, http = Ledger(), RawClient(url)
    try:
        for i in range(count):
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
    sustainable, steps = 0.0, []
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


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_server(bundle: Path, log_path: Path, *flags: str) -> Iterator[Server]:
    """`python -m attnserve serve` on 127.0.0.1 with its stdout and stderr in `log_path` (a file, so a busy
    access log never fills a pipe and stalls the server); SIGTERM and a bounded wait on exit."""
    port = free_port()
    env, command = server_env(), serve_command(bundle, port, *flags)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        assert wait_ready(proc, server.url), server.log()
        yield server
    finally:
        terminate(proc)


def proc_stats(pid: int) -> dict[str, int]:
    """Resident memory (kB), threads and open file descriptors of a process, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return {"rss_kb": fields["VmRSS"], "threads": fields["Threads"], "fds": fds}
