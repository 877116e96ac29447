"""bench.httpclient, the load client of the bench and of these tests: the answers it reads (Content-Length,
chunked, until close), keep-alive reuse, and the transport errors it raises instead of answers."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest

from bench.httpclient import TRANSPORT_ERRORS, Client
from tests.reliability.load import Request, open_loop


@asynccontextmanager
async def canned(*answers: tuple[bytes, bool]) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server that reads each request (head and body) and writes the next canned answer, closing the
    connection after it when its flag says so (or when none is left); yields its URL and, per request, the
    number of the connection it came on."""
    replies, connections = iter(answers), []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, close = len({*connections}) + 1, False
        while not close:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                          if k.lower() == b"content-length")
            await reader.readexactly(length)
            connections.append(number)
            answer, close = next(replies, (b"", True))
            writer.write(answer)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", connections


async def test_reads_length_chunked_and_close_delimited_answers_and_reuses_kept_alive_connections() -> None:
    answers = ((b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False),
               (b"HTTP/1.1 429 Too Many Requests\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                False),
               (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", True),
               (b"HTTP/1.1 503 Service Unavailable\r\n\r\nuntil close", True))
    async with canned(*answers) as (url, connections):
        client = Client(url)
        got = [await client.post("/x", b'{"a": 1}') for _ in range(3)]
        client2 = Client(url)
        got.append(await client2.post("/x", b"{}"))
        await client.aclose()
    assert got == [(200, b"hello"), (429, b"abcde"), (200, b"ok"), (503, b"until close")]
    assert connections == [1, 1, 1, 2]  # kept alive until the server said close


async def test_the_open_loop_holds_only_the_requests_in_flight() -> None:
    """A request's task is let go once answered: held for the whole run, the tasks grow the client's heap and
    its garbage collections pause the schedule (86 ms in a 600 s soak), so requests due meanwhile go at once."""
    count, answered_but_held = 200, list[int]()

    def make(i: int) -> Request:
        if i == count - 1:  # the heap frozen when the load started: only the run's own objects are listed
            tasks = [o for o in gc.get_objects() if isinstance(o, asyncio.Task) and o.done()]
            answered_but_held.append(sum(getattr(t.get_coro(), "__qualname__", "") == "_one" for t in tasks))
        return "/x", {}

    answer = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False)
    async with canned(*[answer] * count) as (url, _):
        ledger = await open_loop(url, rate=400, duration_s=count / 400, make=make, timeout_s=5)
    assert ledger.by_status() == {200: count}
    assert answered_but_held[0] < count // 2, answered_but_held


async def test_a_connection_closed_without_an_answer_is_a_transport_error() -> None:
    async with canned() as (url, _):
        with pytest.raises(TRANSPORT_ERRORS):
            await Client(url).post("/x", b"{}")


async def test_a_missing_answer_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with server:
        with pytest.raises(TimeoutError):
            await Client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", timeout_s=0.2).post("/x", b"{}")


async def test_answers_of_the_real_server(live_server: str) -> None:
    client = Client(live_server)
    try:
        status, body = await client.post("/embed", orjson.dumps({"inputs": ["a", "b", "c"]}))
        assert status == 200 and len(orjson.loads(body)) == 3
        status, body = await client.post("/embed", b"{not json")
        assert status == 422 and orjson.loads(body)["error"]["code"] == "validation_error"
    finally:
        await client.aclose()
