"""The one load-generating HTTP/1.1 client: asyncio streams, keep-alive connections, no connection limit.

Used by the benchmark's closed-loop load (bench.httpload) and by the reliability tests' open-loop load
(tests/reliability/load.py). Not httpx: its pool costs about a millisecond of CPU per request, and on two
cores shared with the server that made the client, not the server, the bottleneck (client-side p99 of
10 s while the server measured every request under 0.5 s). Bodies are bytes, encoded by the caller
(once, up front, where the caller measures).

A request either returns (status, body) or raises one of TRANSPORT_ERRORS, within `timeout_s`. A
connection is reused only when the server kept it alive and it has been idle less than `max_idle_s`
(under the server's 5 s keep-alive), so a reused connection is never one the server is closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

# Everything a request can raise instead of answering: refused or reset connections (OSError), a
# connection closed mid-answer (IncompleteReadError), an oversized head (LimitOverrunError), no answer
# within the timeout (TimeoutError), an answer that is not HTTP (ValueError).
TRANSPORT_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError)

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.contextmanager
def quiet_heap(pauses: list[tuple[int, float]]) -> Iterator[None]:
    """While a load runs: the process's heap so far frozen out of the collector's way, and each garbage
    collection timed into `pauses` as (generation, seconds). A collection pauses the client, which delays
    every answer it reads, and that is read as the server's latency. In the reliability tests' process (torch
    and the exporter loaded), a full collection took up to 417 ms in a 60 s overload run (216 collections);
    frozen, the longest took 5 ms, and the overload check's 429 p99 went from 41-120 ms to 6 ms."""
    started: list[float] = []

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pauses.append((info["generation"], time.perf_counter() - started[0]))

    gc.collect()
    gc.freeze()
    gc.callbacks.append(timer)
    try:
        yield
    finally:
        gc.callbacks.remove(timer)
        gc.unfreeze()


class Client:
    def __init__(self, url: str, timeout_s: float = 30.0, max_idle_s: float = 2.0) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s, self.max_idle_s = timeout_s, max_idle_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def post(self, path: str, body: bytes, content_type: str = "application/json",
                   headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body) of one POST; raises one of TRANSPORT_ERRORS when no whole answer came back."""
        status, _, content = await self.exchange(path, body, content_type, headers)
        return status, content

    async def exchange(self, path: str, body: bytes, content_type: str = "application/json",
                       headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased response headers, body) of one POST with extra request `headers`."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: {content_type}\r\n"
                f"{extra}Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
        async with asyncio.timeout(self.timeout_s):
            reader, writer = await self._connection()
            try:
                writer.write(head + body)
                status, answer_headers, content, keep = await _read_response(reader)
            except BaseException:
                writer.close()
                raise
        if keep:
            self._idle.append((reader, writer, time.monotonic()))
        else:
            writer.close()
        return status, answer_headers, content

    async def _connection(self) -> Stream:
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


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, whether the connection may be reused): Content-Length, chunked, or until close."""
    status, headers = _parse_head(await reader.readuntil(b"\r\n\r\n"))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        return status, headers, await reader.read(), False  # delimited by the server closing the connection
    return status, headers, body, headers.get("connection", "").lower() != "close"


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, lower-cased header names -> values) of a response head; ValueError when it is not HTTP/1.x."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
    return int(rest.split(" ", 1)[0]), headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while size := int((await reader.readline()).split(b";")[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after each chunk
    while (await reader.readline()) not in (b"\r\n", b""):  # trailers, then the final CRLF
        pass
    return b"".join(parts)
