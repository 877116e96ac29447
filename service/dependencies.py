"""FastAPI dependencies: the engine, the JSON content type, and disconnect watching.

All of them are `async def`: none blocks, and FastAPI runs a plain `def` dependency in its thread pool
(a round trip through AnyIO worker threads per dependency per request, measured at ~20% of the event
loop's time under many small requests). The API key is checked by the edge middleware (before the body
is read) on every path but the open ones, so no route dependency repeats it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from service.engine import Engine
from service.errors import ClientGone, NotReady, UnsupportedMediaType

T = TypeVar("T")
Job = Callable[[Awaitable[T]], Awaitable[T]]


async def get_engine(request: Request) -> Engine:
    engine: Engine | None = request.app.state.engine
    if engine is None:
        raise NotReady("the model is not loaded yet")
    return engine


async def require_json(request: Request) -> None:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType("the request body must be JSON (Content-Type: application/json)")


async def job_runner(request: Request) -> Callable[[Awaitable[Any]], Awaitable[Any]]:
    """Runs a coroutine, cancelling it when the client disconnects first (its inputs leave the queue)."""

    async def run(work: Awaitable[Any]) -> Any:
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # its inputs leave the queue before we return
            raise ClientGone("client disconnected")
        return task.result()

    return run


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


EngineDep = Annotated[Engine, Depends(get_engine)]
JobDep = Annotated[Callable[[Awaitable[Any]], Awaitable[Any]], Depends(job_runner)]
