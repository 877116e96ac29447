"""FastAPI dependencies: the engine, the API key, the JSON content type, and disconnect watching."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from service.engine import Engine
from service.errors import ClientGone, NotReady, Unauthorized, UnsupportedMediaType
from service.settings import Settings

T = TypeVar("T")
Job = Callable[[Awaitable[T]], Awaitable[T]]


def get_engine(request: Request) -> Engine:
    engine: Engine | None = request.app.state.engine
    if engine is None:
        raise NotReady("the model is not loaded yet")
    return engine


def require_api_key(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    expected = settings.api_key.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        raise Unauthorized("missing or wrong API key; send `Authorization: Bearer <key>`")


def require_json(request: Request) -> None:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType("the request body must be JSON (Content-Type: application/json)")


def job_runner(request: Request) -> Callable[[Awaitable[Any]], Awaitable[Any]]:
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
