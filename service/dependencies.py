"""FastAPI dependencies: the served models and the request's model, the JSON content type, and disconnect
watching.

All of them are `async def`: none blocks, and FastAPI runs a plain `def` dependency in its thread pool
(a round trip through AnyIO worker threads per dependency per request, a large share of the event loop's
time under many small requests: docs/performance.md, "What the service does for speed"). The API key is
checked by the edge middleware (before the body is read) on every path but the open ones, so no route
dependency repeats it; the model a caller may use is checked here, where the model is known (403).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request

from inference.errors import InvalidRequest, NotReady
from inference.registry import ModelRegistry, quoted
from inference.served import ServedModel
from service.callers import Verdict, forbidden
from service.errors import ClientGone, NotFound, UnsupportedMediaType

T = TypeVar("T")
Job = Callable[[Awaitable[T]], Awaitable[T]]


async def get_models(request: Request) -> ModelRegistry:
    models: ModelRegistry | None = request.app.state.models
    if models is None:
        raise NotReady("the model is not loaded yet")
    return models


async def model_picker(
    request: Request, models: Annotated[ModelRegistry, Depends(get_models)],
) -> Callable[..., ServedModel]:
    """`pick(*names, adapter=None)`: the served model the request names, running the adapter it names (its
    `task` on the wire; pick_model)."""

    def pick(*names: str | None, adapter: str | None = None) -> ServedModel:
        return pick_model(models, request.scope.setdefault("state", {}), *names, adapter=adapter)

    return pick


def pick_model(
    models: ModelRegistry, state: dict[str, Any], *names: str | None, adapter: str | None = None,
) -> ServedModel:
    """The served model the request names (in its body, query or path; None where a place names none),
    recorded in the request's state for the request metrics' `model` label and the `x-model-fingerprint`
    header. With several models served, two different names are a 422 (model_conflict); with one, any name
    reaches it, as a single name does. A name `base:adapter` or `adapter` (the request's `task` on the wire) runs
    the model's adapter of that name (422 unknown_task, no_tasks, or task_conflict when the two disagree). A
    caller whose key may not use the model (the edge's verdict in the state) gets 403."""
    given = {name for name in names if name is not None}
    if len(given) > 1 and len(models) > 1:
        names_given = ", ".join(quoted(n) for n in sorted(given))
        raise InvalidRequest(f"the request names two models: {names_given}", code="model_conflict")
    resolved = [models.resolve(name) for name in sorted(given)] or [models.default]
    model = resolved[0]
    for other in resolved[1:]:  # one model served, named twice: the adapters the names select must agree
        model = model.with_adapter(other.adapter)
    state["model"], state["fingerprint"] = model.name, model.fingerprint
    verdict: Verdict | None = state.get("verdict")
    if (refusal := forbidden(verdict.key if verdict else None, model.name)) is not None:
        raise refusal
    return model.with_adapter(adapter)


def needs(task: str) -> Callable[..., Awaitable[None]]:
    """A route's dependency: 404 when no served model can `task` (the served OpenAPI document leaves the
    route out too); a model that cannot, named by a request while another can, gets the route's own 422."""

    async def some_model_can(models: Annotated[ModelRegistry, Depends(get_models)]) -> None:
        if not any(task in model.tasks for model in models):
            raise NotFound(f"no served model can {task.replace('_', ' ')} (served: {', '.join(models.names)}; "
                           "GET /info lists what each can do)")

    return some_model_can


async def require_json(request: Request) -> None:
    if not is_json(request.headers.get("content-type", "")):
        raise UnsupportedMediaType("the request body must be JSON (Content-Type: application/json)")


def is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def job_runner(request: Request) -> Job[Any]:
    return watch_disconnect(request.receive)


def watch_disconnect(receive: Callable[[], Awaitable[Any]]) -> Job[Any]:
    """Runs a coroutine, cancelling it when the client disconnects first (its inputs leave the queue);
    `receive` is the request's, after its body was read. The coroutine runs in the request's own task, which a
    watcher task cancels on the client's disconnect: one task more per request, not two."""

    async def run(work: Awaitable[Any]) -> Any:
        current, running = asyncio.current_task(), True
        watcher = asyncio.ensure_future(_disconnected(receive))

        def gone(done: asyncio.Future[None]) -> None:
            if running and current is not None and not done.cancelled() and done.exception() is None:
                current.cancel()

        watcher.add_done_callback(gone)
        try:
            return await work
        except asyncio.CancelledError:
            if not (watcher.done() and not watcher.cancelled() and watcher.exception() is None):
                raise  # cancelled otherwise (the server stopping): not the client's doing
            if current is not None:
                current.uncancel()
            raise ClientGone("client disconnected") from None
        finally:
            running = False
            watcher.cancel()

    return run


async def _disconnected(receive: Callable[[], Awaitable[Any]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


ModelsDep = Annotated[ModelRegistry, Depends(get_models)]
PickDep = Annotated[Callable[..., ServedModel], Depends(model_picker)]
ModelQuery = Annotated[str | None, Query(
    description="The served model to use (GET /v1/models lists them); default: the first. With one model "
    "served, any name is accepted. May also be given as the body's `model`.",
)]
JobDep = Annotated[Job[Any], Depends(job_runner)]
