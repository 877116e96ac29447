"""One request's record: who asks (its `Caller`: priority class and fairness key), where its latency went
(tokenising, waiting in the queue, graph runs) and what it used (tokens, inputs answered from the cache).

A caller opens a `RequestTiming` for each request with `begin(caller)` (the HTTP edge does, naming the
caller its key belongs to, and sends the figures as response headers and debits the caller's budget); a
served model reads the caller from `current()` and adds to it (a context variable: the request's task, and
the tasks it starts, see the same record).

For a request of several inputs the queue time is the longest wait of any of its inputs (the wait
before its last input started running), and the inference time runs from the start of the first graph
run that carried one of its inputs to the end of the last one. Inputs that waited for another request's
run of them add that whole wait to the queue time; runs of several graph kinds add up.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from inference.scheduling.fairqueue import Caller


@dataclass
class RequestTiming:
    started: float = field(default_factory=time.perf_counter)
    caller: Caller = field(default_factory=Caller)
    tokenize_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    tokens: int = 0  # tokens of the inputs admitted (every window's; special tokens included)
    cached: int = 0  # inputs answered without a run of their own: cache, repeat, or another request's run
    used: bool = False  # a served model recorded something: the request was tokenised, run or answered

    def tokenized(self, seconds: float) -> None:
        self.tokenize_s += seconds
        self.used = True

    def ran(self, queue_s: float, inference_s: float) -> None:
        self.queue_s += queue_s
        self.inference_s += inference_s
        self.used = True

    def admitted(self, tokens: int) -> None:
        self.tokens += tokens
        self.used = True

    def answered_cached(self, inputs: int) -> None:
        self.cached += inputs
        self.used = True

    @property
    def total_s(self) -> float:
        return time.perf_counter() - self.started


_current: ContextVar[RequestTiming | None] = ContextVar("attnserve_request_timing", default=None)


def begin(caller: Caller | None = None) -> tuple[RequestTiming, Token[RequestTiming | None]]:
    """A fresh record for the request about to be handled in this context (pass the token to `end`)."""
    timing = RequestTiming(caller=caller or Caller())
    return timing, _current.set(timing)


def end(token: Token[RequestTiming | None]) -> None:
    _current.reset(token)


def current() -> RequestTiming | None:
    """The record of the request being handled, or None outside a request (warm-up). The readiness probe
    after a failed inference runs inside `/ready`, so that answer carries the probe's times."""
    return _current.get()
