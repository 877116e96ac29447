"""In-process serving for tests: an app with its lifespan running, driven by httpx, optionally around an
injected test double of the runtime (tests.helpers.fakes); the one-error-shape assertion; `until`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from service.app import create_app
from service.models import load_runtimes
from service.runtime import Runtime
from service.settings import Settings


@asynccontextmanager
async def serving(
    bundle: Path | str | list[Path | str], wrap: Callable[[Runtime], Runtime] | None = None, **overrides: Any,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app with its lifespan running and an httpx client talking to it in process. `bundle`: one or
    several (`Path`, or "NAME=DIR"). `wrap` receives each runtime loaded from them and returns what the
    app serves (a fake from tests.helpers.fakes)."""
    settings = Settings(bundle=bundle, **overrides)
    runtimes = [wrap(runtime) for runtime in load_runtimes(settings)] if wrap is not None else None
    app = create_app(settings, runtimes)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield app, client


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The one error shape, a request id, and no internals."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}, body
    assert response.headers.get("x-request-id")
    assert "Traceback" not in response.text and "/work/" not in response.text and ".py" not in response.text
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """Wait until `condition()` holds; fail the test when it does not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)
