"""uvicorn's httptools protocol with a deadline on the request head (ATTNSERVE_HEADER_TIMEOUT_S).

uvicorn times out only idle kept-alive connections; a client that connects, or sends part of a request
line or headers, and then stalls holds its connection for ever. Here a timer starts when the connection
opens (and when a later request on a kept-alive connection begins) and stops when the headers are
complete; if it fires first, the client gets 408 in the one JSON error shape and the connection closes.
The body has its own deadline in `service.middleware` (ATTNSERVE_BODY_TIMEOUT_S).

A connection closed while its client is still sending a request body (a 408 body deadline, a 413) closes
lingering, as nginx and Apache do: the server sends the response and a FIN, then reads and drops what the
client still sends until the client closes or LINGER_S passes. A plain close would answer the client's next
bytes with a TCP reset, and the client's kernel would drop the response it had not yet read.

A response's status line and headers go out with its body, in one write: uvicorn writes them when the app sends
`http.response.start`, and the body on the next message. Two writes are two segments on the wire, and on loopback
each one's delivery, the client's wake-up included, is done by the writing thread: the event loop. So the head is
held until the body's write (or the response's end, or the next turn of the loop, whichever comes first), and
both go as one; `python -m bench.sidebyside` measured what it buys a lone request (docs/performance.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.errors import RequestTimeout, error_body

LINGER_S = 2.0


RESPONSE_HEAD = b"HTTP/1.1 "
INTERIM = b"HTTP/1.1 1"  # 100 Continue: written on its own, at once (the client waits for it to send the body)


class LingeringTransport:
    """The connection's transport as uvicorn sees it; `close()` lingers while `sending()` says the client is
    mid-body: write_eof (the response is flushed, then a FIN), keep reading, close on the client's EOF or
    after LINGER_S (asyncio closes a transport whose protocol's eof_received returns None). A response's head is
    held and written with what follows it (module docstring)."""

    def __init__(self, transport: asyncio.Transport, sending: Callable[[], bool]) -> None:
        self._transport, self._sending = transport, sending
        self.lingering = False
        self._head = b""  # a response's status line and headers, not written yet

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._head:
            data, self._head = self._head + data, b""
        elif data[:9] == RESPONSE_HEAD and data[:10] != INTERIM:
            self._head = bytes(data)
            asyncio.get_running_loop().call_soon(self.flush)  # whatever comes after it, the head goes out this turn
            return
        self._transport.write(data)

    def flush(self) -> None:
        """Write a held head now (the response ended without a body: HEAD, 204, or the loop turned)."""
        if self._head and not self._transport.is_closing():
            self._transport.write(self._head)
        self._head = b""

    def close(self) -> None:
        self.flush()
        if self.lingering:
            return
        if self._transport.is_closing() or not self._transport.can_write_eof() or not self._sending():
            self._transport.close()
            return
        self.lingering = True
        self._transport.write_eof()
        self._transport.resume_reading()  # uvicorn may have paused it: unread bytes would still be reset
        asyncio.get_running_loop().call_later(LINGER_S, self._transport.close)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeadDeadlineProtocol(HttpToolsProtocol):
    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(LingeringTransport(transport, self._mid_body))  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self.transport.lingering:  # type: ignore[attr-defined]
            super().data_received(data)

    def _mid_body(self) -> bool:
        return self.cycle is not None and self.cycle.more_body

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a later request on a kept-alive connection
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]  # a head without a body
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        body = error_body(RequestTimeout(
            f"the request line and headers did not arrive within {self.header_timeout_s:g} s "
            "(ATTNSERVE_HEADER_TIMEOUT_S)"
        ))
        head = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(head + body)
        self.transport.close()


def with_header_timeout(seconds: float) -> type[HeadDeadlineProtocol]:
    """The protocol class to pass as uvicorn's `http=`, with its head deadline set."""
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"header_timeout_s": seconds})
