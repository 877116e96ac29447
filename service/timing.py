"""Where one request's latency went: tokenising, waiting in the queue, graph runs.

The edge (service.middleware) opens a `RequestTiming` for each HTTP request with `begin()`; the engine,
which knows nothing about HTTP, adds to `current()` (a context variable: the request's task, and the
tasks it starts, see the same record); the edge then sends the figures as response headers, as
text-embeddings-inference does: whole milliseconds in `x-tokenization-time`, `x-queue-time`,
`x-inference-time`, and `x-total-time` for the whole request as the server saw it.

For a request of several inputs the queue time is the longest wait of any of its inputs (the wait
before its last input started running), and the inference time runs from the start of the first graph
run that carried one of its inputs to the end of the last one.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

HEADERS = ("x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time")


@dataclass
class RequestTiming:
    started: float = field(default_factory=time.perf_counter)
    tokenize_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    used: bool = False  # the engine recorded something: the request was tokenised or run

    def tokenized(self, seconds: float) -> None:
        self.tokenize_s += seconds
        self.used = True

    def ran(self, queue_s: float, inference_s: float) -> None:
        self.queue_s += queue_s
        self.inference_s += inference_s
        self.used = True

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The timing headers, in whole milliseconds (what TEI sends); none when the engine was not used."""
        if not self.used:
            return []
        total = time.perf_counter() - self.started
        values = (total, self.tokenize_s, self.queue_s, self.inference_s)
        return [(name.encode(), b"%d" % (seconds * 1000)) for name, seconds in zip(HEADERS, values, strict=True)]


_current: ContextVar[RequestTiming | None] = ContextVar("attnserve_request_timing", default=None)


def begin() -> tuple[RequestTiming, Token[RequestTiming | None]]:
    """A fresh record for the request about to be handled in this context (pass the token to `end`)."""
    timing = RequestTiming()
    return timing, _current.set(timing)


def end(token: Token[RequestTiming | None]) -> None:
    _current.reset(token)


def current() -> RequestTiming | None:
    """The record of the request being handled, or None outside a request (warm-up). The readiness probe
    after a failed inference runs inside `/ready`, so that answer carries the probe's times."""
    return _current.get()
