"""In-process serving for tests: an app with its lifespan running, driven by httpx, optionally around an
injected test double of a loaded bundle (tests.helpers.fakes); the same app behind a real uvicorn server on
127.0.0.1 in the test's event loop; the one-error-shape assertion; `until`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI

from inference.options import ServingOptions
from inference.registry import load_bundles, start_models
from inference.runtime.loading import LoadedBundle
from inference.served import ServedModel
from service.app import create_app
from service.deadlines import with_header_timeout
from service.settings import Settings
from tests.helpers.process import free_port


@asynccontextmanager
async def serving(
    bundle: Path | str | list[Path | str], wrap: Callable[[LoadedBundle], LoadedBundle] | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app with its lifespan running and an httpx client talking to it in process. `bundle`: one or
    several (`Path`, or "NAME=DIR"). `wrap` receives each bundle loaded from them and returns what the
    app serves (a fake from tests.helpers.fakes)."""
    settings = Settings(bundle=bundle, **overrides)
    loaded = [wrap(b) for b in load_bundles(settings.bundle, settings.load_options())] if wrap is not None else None
    app = create_app(settings, loaded)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield app, client


@asynccontextmanager
async def uvicorn_here(
    bundle: Path, wrap: Callable[[LoadedBundle], LoadedBundle] | None = None, **overrides: Any,
) -> AsyncIterator[tuple[FastAPI, str]]:
    """create_app served by uvicorn.Server on 127.0.0.1 in this event loop, as `attnserve serve` serves it
    (real sockets, httptools), around `wrap(bundle)` as in `serving`; yields (app, base url)."""
    settings = Settings(bundle=bundle, **{"intra_op_threads": 1, **overrides})
    loaded = load_bundles(settings.bundle, settings.load_options())
    app = create_app(settings, [wrap(b) for b in loaded] if wrap is not None else loaded)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on",
                            http=with_header_timeout(settings.header_timeout_s))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


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


def graph_runs(app: FastAPI) -> float:
    """Graph runs so far, every kind and outcome, as the app's own metrics count them."""
    from tests.helpers.metrics import sample

    return sample(app.state.metrics.render().decode(), "attnserve_model_runs_total")


async def post_ok(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer of a POST that must succeed (the body is the failure message otherwise)."""
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def worst(got: Any, expected: Any) -> float:
    """The largest |got - expected| of an answer's numbers (float32) against the reference's, of the same shape."""
    got = np.asarray(got, dtype=np.float32)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return float(np.abs(got - expected).max())


@asynccontextmanager
async def core(loaded: LoadedBundle, options: ServingOptions, name: str = "m") -> AsyncIterator[ServedModel]:
    """`loaded` served by the inference core alone (inference.registry.start_models, no HTTP) as `name`; its batcher
    stopped and its executors shut down after."""
    models, executors = start_models([name], [loaded], options)
    try:
        yield models.default
    finally:
        await models.default.batcher.stop()
        for executor in executors:
            executor.shutdown()
