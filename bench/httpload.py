"""Closed-loop HTTP load: N workers on keep-alive connections, each sends, waits, sends again.

The client is bench.httpclient (a minimal HTTP/1.1 client on asyncio streams, not httpx: on a 2-core
machine shared with the server, httpx's per-request CPU would be taken from the server being measured).
Bodies are encoded once, up front. The client's own CPU time (os.times) is reported so its share of the
machine is visible, and, when a probe is given, the server's CPU time per text answered: what serving
costs, which other jobs on a shared machine disturb far less than wall time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.httpclient import TRANSPORT_ERRORS, Client
from bench.procs import HOST


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    texts: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = None
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int | dict[int, int] | None]:
        lat = np.array(self.latencies_s or [float("nan")]) * 1000.0
        p50, p95, p99 = (float(np.percentile(lat, q)) for q in (50, 95, 99))
        wall = max(self.wall_s, 1e-9)
        server = None if self.server_cpu_s is None or not self.texts else 1000 * self.server_cpu_s / self.texts
        return {"requests": self.requests, "errors": self.errors, "texts_per_s": self.texts / wall,
                "tokens_per_s": self.tokens / wall, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
                "wall_s": self.wall_s, "client_cpu_frac": self.client_cpu_s / wall, "cpu_ms_per_text": server,
                "statuses": self.statuses}


@dataclass(frozen=True)
class Payload:
    body: bytes
    texts: int
    tokens: int


async def _worker(client: Client, path: str, payloads: list[Payload], offset: int, deadline: float,
                  result: LoadResult) -> None:
    i = offset
    while time.perf_counter() < deadline:
        payload = payloads[i % len(payloads)]
        i += 1
        start = time.perf_counter()
        status = await _send(client, path, payload.body)
        result.latencies_s.append(time.perf_counter() - start)
        result.statuses[status] = result.statuses.get(status, 0) + 1
        result.requests += 1
        if status == 200:
            result.texts, result.tokens = result.texts + payload.texts, result.tokens + payload.tokens
        else:
            result.errors += 1
    await client.aclose()


async def _send(client: Client, path: str, body: bytes) -> int:
    try:
        status, _ = await client.post(path, body)
        return status
    except TRANSPORT_ERRORS:
        return 0  # transport error


async def run_load(port: int, path: str, payloads: list[Payload], workers: int, duration_s: float,
                   server_cpu: Callable[[], float] | None = None) -> LoadResult:
    """`workers` closed-loop callers for `duration_s`; each starts at its own payload offset. `server_cpu`
    reads the server's CPU seconds so far (before and after)."""
    result = LoadResult()
    server0 = server_cpu() if server_cpu else 0.0
    cpu0, start = os.times(), time.perf_counter()
    deadline = start + duration_s
    clients = [Client(f"http://{HOST}:{port}", timeout_s=120.0) for _ in range(workers)]  # one connection each
    await asyncio.gather(*(_worker(c, path, payloads, w, deadline, result) for w, c in enumerate(clients)))
    cpu1 = os.times()
    result.wall_s = time.perf_counter() - start
    result.client_cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    result.server_cpu_s = server_cpu() - server0 if server_cpu else None
    return result
