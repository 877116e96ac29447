"""Closed-loop HTTP load: N workers on keep-alive connections, each sends, waits, sends again.

The client is a minimal HTTP/1.1 writer/reader on asyncio streams rather than httpx: on a 2-core
machine shared with the server, httpx's per-request CPU (about a millisecond) would be taken from
the server being measured. Bodies are encoded once, up front. The client's own CPU time (os.times)
is reported so its share of the machine is visible.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import numpy as np

from bench.procs import HOST


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    texts: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int | dict[int, int]]:
        lat = np.array(self.latencies_s or [float("nan")]) * 1000.0
        p50, p95, p99 = (float(np.percentile(lat, q)) for q in (50, 95, 99))
        wall = max(self.wall_s, 1e-9)
        return {"requests": self.requests, "errors": self.errors, "texts_per_s": self.texts / wall,
                "tokens_per_s": self.tokens / wall, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
                "wall_s": self.wall_s, "client_cpu_frac": self.client_cpu_s / wall, "statuses": self.statuses}


@dataclass(frozen=True)
class Payload:
    body: bytes
    texts: int
    tokens: int


class Connection:
    """One keep-alive HTTP/1.1 connection; reads Content-Length or chunked bodies."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        return await self._response()

    async def _response(self) -> tuple[int, bytes]:
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        headers = await self._headers()
        if headers.get("transfer-encoding") == "chunked":
            body = await self._chunked()
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection") == "close":
            await self.close()
        return int(status_line.split()[1]), body

    async def _headers(self) -> dict[str, str]:
        assert self.reader is not None
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        return headers

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()
        return b"".join(parts)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def _worker(port: int, path: str, payloads: list[Payload], offset: int, deadline: float,
                  result: LoadResult) -> None:
    conn, i = Connection(port), offset
    while time.perf_counter() < deadline:
        payload = payloads[i % len(payloads)]
        i += 1
        start = time.perf_counter()
        status = await _send(conn, path, payload.body)
        result.latencies_s.append(time.perf_counter() - start)
        result.statuses[status] = result.statuses.get(status, 0) + 1
        result.requests += 1
        if status == 200:
            result.texts, result.tokens = result.texts + payload.texts, result.tokens + payload.tokens
        else:
            result.errors += 1
    await conn.close()


async def _send(conn: Connection, path: str, body: bytes) -> int:
    try:
        status, _ = await conn.post(path, body)
        return status
    except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError):
        await conn.close()
        return 0  # transport error


async def run_load(port: int, path: str, payloads: list[Payload], workers: int, duration_s: float) -> LoadResult:
    """`workers` closed-loop callers for `duration_s`; each starts at its own payload offset."""
    result = LoadResult()
    cpu0, start = os.times(), time.perf_counter()
    deadline = start + duration_s
    await asyncio.gather(*(_worker(port, path, payloads, w, deadline, result) for w in range(workers)))
    cpu1 = os.times()
    result.wall_s = time.perf_counter() - start
    result.client_cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return result
