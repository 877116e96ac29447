"""The hot routes' short path: a well-formed request to a batched route is answered here, inside the edge
middleware, without FastAPI's routing, dependency solving and response classes.

What it does is what the route does, with the same functions: the body is validated by the route's own
request model (pydantic's JSON parser and validator in one pass), the model picked as the route's
dependency picks it, the work run by the route's own `answer`, and the answer written as the route writes it
(orjson, `application/json`). What it does not do, it hands on: anything that is not a valid JSON request
with a model ready to serve it (wrong content type, a body the model refuses, no model loaded, no model for
the task, a model name that does not resolve) goes to the FastAPI app with its body, which answers it as
it answers every request. So an error has one shape and one place it is made, and the short path only
answers what FastAPI would answer 200, or the core's errors once the work started (rendered by the
app's one error renderer). The edge middleware around both does the key, the body limit, the request id,
the timing headers and the metrics (the route label is the FastAPI route's path).

Measured by `make bench` (CPU per text) and `python -m bench.sidebyside` (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from pydantic import BaseModel, ValidationError

from inference.errors import InferenceError
from inference.registry import ModelRegistry
from inference.served import ServedModel
from service.dependencies import Job, is_json, pick_model, watch_disconnect
from service.middleware import ASGIApp, Message, Receive, Scope, Send, replay

Answer = Callable[[Any, ServedModel, Job[Any]], Awaitable[Any]]
Render = Callable[[str, Exception], tuple[int, dict[str, str], bytes]]


@dataclass(frozen=True)
class HotRoute:
    """One batched POST route as the short path serves it: its request model, the task a model needs for it
    (None: any model), whether `?model=` names the model, and the route's answer (JSON-able content)."""

    path: str
    request: type[BaseModel]
    answer: Answer
    task: str | None = None
    model_query: bool = True


class HotRoutes:
    """ASGI middleware: POST to one of `routes` with a JSON body takes the short path; everything else,
    and every request the short path would refuse, goes to `app` unchanged (with its body)."""

    def __init__(
        self, app: ASGIApp, routes: Mapping[str, HotRoute], models: Callable[[], ModelRegistry | None],
        render: Render,
    ) -> None:
        self.app, self.routes, self.models, self.render = app, routes, models, render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        models = self.models() if route is not None else None
        if route is None or models is None or not is_json(_header(scope, b"content-type")):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        served, request = _accepted(route, models, scope, body)
        if served is None or request is None:
            await self.app(scope, replay(body, receive), send)  # FastAPI answers it, as it answers any refusal
            return
        scope["route"] = route  # its path is the metrics' route label, as the FastAPI route's is
        try:
            content = await route.answer(request, served, watch_disconnect(receive))
        except InferenceError as error:
            status, headers, payload = self.render(scope["path"], error)
            await _send(send, status, payload, headers)
            return
        await _send(send, 200, orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY))


def _accepted(
    route: HotRoute, models: ModelRegistry, scope: Scope, body: bytes,
) -> tuple[ServedModel | None, BaseModel | None]:
    """The model and the validated request, or (None, None) when FastAPI's path must answer."""
    try:
        request = route.request.model_validate_json(body)
    except ValidationError:
        return None, None
    if route.task is not None and not any(route.task in model.tasks for model in models):
        return None, None
    query = _model_query(scope) if route.model_query else None
    try:
        served = pick_model(models, scope.setdefault("state", {}), getattr(request, "model", None), query,
                            adapter=getattr(request, "task", None))
    except InferenceError:
        return None, None
    return served, request


def _model_query(scope: Scope) -> str | None:
    """`?model=`, as FastAPI reads a query parameter: the last one given, a blank one kept."""
    given = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True).get("model")
    return given[-1] if given else None


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message: Message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return ""
