"""A response's head and body go out in one write (service.deadlines.LingeringTransport): over a real socket, served
by uvicorn with the server's own protocol, an answer is one write to the connection; a head whose response has no
body still goes out at the response's end or the loop's next turn, and `100 Continue` goes out at once, alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import service.deadlines
from service.deadlines import LingeringTransport
from tests.helpers.serving import uvicorn_here

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder:
    """A transport that keeps what was written to it, one item per write."""

    def __init__(self, inner: Any = None) -> None:
        self.inner, self.writes = inner, []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        if self.inner is not None:
            self.inner.write(data)

    def is_closing(self) -> bool:
        return False if self.inner is None else bool(self.inner.is_closing())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_head_waits_for_its_body_then_both_go_as_one() -> None:
    sent = Recorder()
    transport = LingeringTransport(sent, lambda: False)  # type: ignore[arg-type]
    transport.write(HEAD)
    assert sent.writes == []
    transport.write(b"{}")
    assert sent.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)  # the turn's flush finds nothing held
    assert sent.writes == [HEAD + b"{}"]


async def test_a_head_without_a_body_goes_at_the_next_turn_or_at_the_end() -> None:
    sent = Recorder()
    transport = LingeringTransport(sent, lambda: False)  # type: ignore[arg-type]
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert sent.writes == [HEAD]
    transport.write(HEAD)
    transport.flush()  # the protocol's on_response_complete
    assert sent.writes == [HEAD, HEAD]


async def test_continue_is_written_at_once() -> None:
    sent = Recorder()
    LingeringTransport(sent, lambda: False).write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[arg-type]
    assert sent.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Recorder]]:
    """Every connection's socket transport, recorded under the server's LingeringTransport."""
    made: list[Recorder] = []

    class Recorded(LingeringTransport):
        def __init__(self, transport: asyncio.Transport, sending: Any) -> None:
            made.append(Recorder(transport))
            super().__init__(made[-1], sending)  # type: ignore[arg-type]

    monkeypatch.setattr(service.deadlines, "LingeringTransport", Recorded)
    yield made


async def exchange(port: int, head: bytes, body: bytes, expect: bool = False) -> bytes:
    """One request on a raw connection; with `expect`, the body is sent only after `100 Continue` arrived."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        if expect:
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert interim.startswith(b"HTTP/1.1 100 "), interim
        writer.write(body)
        status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(next(line.split(b":")[1] for line in status.split(b"\r\n") if line.lower().startswith(
            b"content-length:")))
        return status + await asyncio.wait_for(reader.readexactly(length), 10)
    finally:
        writer.close()


def post_head(length: int, expect: bool = False) -> bytes:
    return (b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (b"Expect: 100-continue\r\n" if expect else b"") + b"Content-Length: %d\r\n\r\n" % length)


async def test_an_answer_is_one_write_and_continue_comes_first(tiny_bundle: Path, recorded: list[Recorder]) -> None:
    body = orjson.dumps({"inputs": ["one write"]})
    async with uvicorn_here(tiny_bundle) as (_, url):
        port = int(url.rsplit(":", 1)[1])
        answer = await exchange(port, post_head(len(body)), body)
        continued = await exchange(port, post_head(len(body), expect=True), body, expect=True)
        refused = await exchange(port, post_head(2), b"{]")
    assert answer.startswith(b"HTTP/1.1 200 ") and len(orjson.loads(answer.split(b"\r\n\r\n", 1)[1])) == 1
    assert continued.startswith(b"HTTP/1.1 200 ")
    assert refused.startswith(b"HTTP/1.1 422 ")
    plain, expecting, bad = (connection.writes for connection in recorded)
    assert plain == [answer] and bad == [refused]  # the head and the body: one write each
    assert expecting == [b"HTTP/1.1 100 Continue\r\n\r\n", continued]
