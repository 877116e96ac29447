"""Where one request's latency went: tokenising, waiting in the queue, graph runs.

A caller opens a `RequestTiming` for each request with `begin()` (the HTTP edge does, and sends the
figures as response headers); a served model adds to `current()` (a context variable: the request's task,
and the tasks it starts, see the same record).

For a request of several inputs the queue time is the longest wait of any of its inputs (the wait
before its last input started running), and the inference time runs from the start of the first graph
run that carried one of its inputs to the end of the last one.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field


@dataclass
class RequestTiming:
    started: float = field(default_factory=time.perf_counter)
    tokenize_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    used: bool = False  # a served model recorded something: the request was tokenised or run

    def tokenized(self, seconds: float) -> None:
        self.tokenize_s += seconds
        self.used = True

    def ran(self, queue_s: float, inference_s: float) -> None:
        self.queue_s += queue_s
        self.inference_s += inference_s
        self.used = True

    @property
    def total_s(self) -> float:
        return time.perf_counter() - self.started


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
