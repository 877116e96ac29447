"""The HTTP edge, as one pure ASGI middleware (no framework imports): request id, the caller (API key,
budget, class), body limit, per-route metrics, the request's headers (from `inference.scheduling.timing`'s record:
whole milliseconds in `x-tokenization-time`, `x-queue-time`, `x-inference-time`, and `x-total-time` for the
whole request as the server saw it, as text-embeddings-inference sends them; `x-cached-inputs`, the inputs
answered without a graph run; `x-model-fingerprint`, the model build that answered), and the last line of
defence for unknown errors (logged, answered with a generic 500 in the one error shape).

The caller is judged here (`service.callers`), before the body is read or parsed, so a client without a
key learns nothing about its body (no 422) and cannot make the server buffer one; a caller over its budget
gets 429 with Retry-After just as early. CORS preflights (OPTIONS) and the open paths pass without a key.
The request's record names its caller (class and fairness key) for the core; once answered, the tokens it
used are taken from the caller's budget. When the keys change while a request is in flight, it is judged
again before its answer starts (a revoked key's answer becomes its 401).

A caller over its budget is refused only on the batched routes (`batched(scope)`: those that spend tokens);
it may still read /info or /v1/models and tokenise. Under overload, requests to the batched routes are
refused with 429 here, before their body is read or parsed, while `busy(scope, class)` says their batcher
has no free permit for the caller's class:
refusing must cost far less than serving, or open-loop overload starves the event loop before admission
can act. The engine's admission stays exact. Error bodies follow the path (`errors.error_body_for`).

The body is read here, counting bytes as they arrive, so the payload limit holds whether
Content-Length is present, absent (chunked) or wrong, and within a deadline (408 and the connection
closed past it); the route then reads the buffered body. The deadline on the request head is the
protocol's (`service.deadlines`).

Open paths (no key): /health, /ready, /metrics, and /explore with its files (exactly the files in
service/static/, nothing else under /explore/).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from inference.errors import InferenceError, Overloaded
from inference.scheduling import timing
from inference.scheduling.fairqueue import Caller, Priority
from service.callers import Callers, Verdict
from service.errors import (
    GENERIC_500,
    PayloadTooLarge,
    RequestTimeout,
    error_body_for,
    headers_of,
    status_of,
)
from service.metrics import Metrics

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TIMING_HEADERS = ("x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time")
CACHED_HEADER, FINGERPRINT_HEADER = "x-cached-inputs", "x-model-fingerprint"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,128}$")
_BODY_METHODS = {"POST", "PUT", "PATCH"}


# The attention explorer's page and files (served by service/routes/explore.py). They hold no data, so they are
# open like the probes; the page asks for the key and sends it on its calls to the API.
STATIC_DIR = Path(__file__).resolve().parent / "static"
EXPLORE_PATHS = frozenset({
    "/explore", "/explore/", *(f"/explore/{f.name}" for f in STATIC_DIR.iterdir() if f.is_file()),
})
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics", "/v2/health/live", "/v2/health/ready", *EXPLORE_PATHS})


class EdgeMiddleware:
    def __init__(
        self, app: ASGIApp, payload_limit_bytes: int, metrics: Metrics, callers: Callers | None = None,
        batched: Callable[[Scope], bool] | None = None, busy: Callable[[Scope, Priority], bool] | None = None,
        body_timeout_s: float = 30.0,
    ) -> None:
        self.app, self.limit, self.metrics, self.body_timeout_s = app, payload_limit_bytes, metrics, body_timeout_s
        self.callers, self.batched, self.busy = callers or Callers(), batched or (lambda scope: False), busy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, request_id = time.perf_counter(), _request_id(scope)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        record, token = timing.begin()
        response = _Response(send, request_id, scope, record, self.callers)
        try:
            if (verdict := await self._judge(scope, response)) is not None:
                record.caller, state["verdict"], response.verdict = verdict.caller, verdict, verdict
                await self._handle(scope, receive, response, verdict.caller.priority)
        except Exception:
            log.exception("unhandled error in %s %s (request %s)", scope["method"], scope["path"], request_id)
            if not response.started:
                await response.error(InferenceError(GENERIC_500))
        finally:
            timing.end(token)
            self._account(scope, response, record, time.perf_counter() - started)

    async def _judge(self, scope: Scope, response: _Response) -> Verdict | None:
        """The request's caller; None once a refusal (401, 429 over budget, 422 bad x-priority) was answered."""
        if scope["method"] == "OPTIONS" or scope["path"] in OPEN_PATHS:
            return Verdict(None, Caller())
        try:
            return self.callers.verdict(scope.get("headers", []), spends=self.batched(scope))
        except InferenceError as refused:
            await response.error(refused)
            return None

    def _account(self, scope: Scope, response: _Response, record: timing.RequestTiming, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")
        model = scope["state"].get("model", "")  # set by the route's dependency once it resolved the model
        self.metrics.request(route, response.status, seconds, model, record.caller.name)
        if response.verdict is not None and record.tokens:
            self.callers.spend(response.verdict, record.tokens)

    async def _handle(self, scope: Scope, receive: Receive, response: _Response, priority: Priority) -> None:
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, response.send)
            return
        if self.busy is not None and self.batched(scope) and self.busy(scope, priority):
            setting = "ATTNSERVE_BULK_QUEUE_SHARE of " if priority == "bulk" else ""
            await response.error(Overloaded(
                f"server busy: no admission permit is free for {priority} inputs ({setting}ATTNSERVE_MAX_QUEUE)"
            ))
            return
        too_large = PayloadTooLarge(
            f"request body is over the limit of {self.limit} bytes (ATTNSERVE_PAYLOAD_LIMIT_BYTES)"
        )
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await response.error(too_large)
            return
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await _read_body(receive, self.limit)
        except _Disconnected:
            return
        except TimeoutError:
            await response.error(RequestTimeout(
                f"the request body did not arrive within {self.body_timeout_s:g} s (ATTNSERVE_BODY_TIMEOUT_S)"
            ))
            return
        if body is None:
            await response.error(too_large)
            return
        await self.app(scope, replay(body, receive), response.send)


class _Disconnected(Exception):
    """The client went away before its body arrived."""


class _Response:
    """Wraps `send`: adds X-Request-ID and the request's headers, remembers the status; when the keys changed
    since the request was judged and now refuse it, answers that refusal instead (the app's answer is dropped)."""

    def __init__(
        self, send: Send, request_id: str, scope: Scope, record: timing.RequestTiming, callers: Callers,
    ) -> None:
        self._send, self.request_id, self.scope, self.record, self._callers = send, request_id, scope, record, callers
        self.path: str = scope["path"]
        self.started, self.status, self.dropped = False, 500, False
        self.verdict: Verdict | None = None

    async def send(self, message: Message) -> None:
        if self.dropped:
            return
        if message["type"] == "http.response.start":
            if (refusal := self._stale()) is not None:
                self.verdict = None  # refused: nothing to debit
                await self.error(refusal)
                self.dropped = True
                return
            self.started, self.status = True, int(message["status"])
            message["headers"] = [
                *message.get("headers", []), (b"x-request-id", self.request_id.encode()),
                *timing_headers(self.record), *self._fingerprint(),
            ]
        await self._send(message)

    def _stale(self) -> InferenceError | None:
        if self.verdict is None or self.started:
            return None
        return self._callers.recheck(self.verdict, self.scope["state"].get("model"))

    def _fingerprint(self) -> list[tuple[bytes, bytes]]:
        fingerprint = self.scope["state"].get("fingerprint")  # set with the model by the route's dependency
        return [(FINGERPRINT_HEADER.encode(), fingerprint.encode())] if fingerprint else []

    async def error(self, error: InferenceError) -> None:
        body = error_body_for(self.path, error)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in headers_of(error).items()]
        if isinstance(error, PayloadTooLarge | RequestTimeout):
            headers.append((b"connection", b"close"))  # the rest of the body is not read
        await self.send({"type": "http.response.start", "status": status_of(error)[0], "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def timing_headers(record: timing.RequestTiming) -> list[tuple[bytes, bytes]]:
    """The timing headers, in whole milliseconds (what TEI sends); none when no model was used."""
    if not record.used:
        return []
    values = (record.total_s, record.tokenize_s, record.queue_s, record.inference_s)
    timings = [(name.encode(), b"%d" % (seconds * 1000)) for name, seconds in zip(TIMING_HEADERS, values, strict=True)]
    return [*timings, (CACHED_HEADER.encode(), b"%d" % record.cached)]


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes `limit` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """`receive` as if `body` had not been read yet: the whole body first, then what the client sends."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: http.disconnect when the client goes

    return replay


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _request_id(scope: Scope) -> str:
    given = _header(scope, b"x-request-id")
    return given if given and _REQUEST_ID.match(given) else uuid.uuid4().hex
