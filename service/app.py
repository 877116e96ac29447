"""The app factory: `create_app(settings)` wires routes, middleware, the one exception handler and the
lifespan (load and verify the bundle, start the batcher, warm up; on shutdown drain admitted work)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnserve import __version__
from service.batcher import Batcher, BatchLimits
from service.engine import Engine, EngineLimits
from service.errors import InvalidRequest, ServiceError, error_body, for_status
from service.metrics import Metrics
from service.middleware import EdgeMiddleware
from service.routes import attention, openai, ops, tei
from service.runtime import Runtime, load_runtime
from service.settings import Settings
from service.timing import HEADERS as TIMING_HEADERS

log = logging.getLogger(__name__)
ADMITTED_PATHS = frozenset({  # routes that use the batcher (POST / embeds or compares)
    "/embed", "/classify", "/attention", "/v1/embeddings", "/predict", "/similarity", "/embed_all", "/",
})


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    """The ASGI app. `runtime` may be given (the CLI loads it first, tests inject fakes); else the
    lifespan loads the bundle named by `settings`."""
    metrics = Metrics()
    app = FastAPI(title="attnserve", version=__version__, lifespan=_lifespan(settings, runtime, metrics))
    app.state.settings, app.state.metrics, app.state.engine = settings, metrics, None
    for module in (openai, tei, attention, ops):
        app.include_router(module.router)
    for exc_type in (ServiceError, StarletteHTTPException, RequestValidationError):
        app.add_exception_handler(exc_type, handle_error)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After", *TIMING_HEADERS],
        )
    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    app.add_middleware(EdgeMiddleware, payload_limit_bytes=settings.payload_limit_bytes, metrics=metrics,
                       api_key=api_key, busy=lambda: _busy(app), admitted_paths=ADMITTED_PATHS,
                       body_timeout_s=settings.body_timeout_s)
    return app


def _busy(app: FastAPI) -> bool:
    engine: Engine | None = app.state.engine
    return engine is not None and engine.batcher.full


def _lifespan(settings: Settings, runtime: Runtime | None, metrics: Metrics) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine, executors = start_engine(settings, runtime or load_runtime(settings), metrics)
        app.state.engine = engine
        try:
            await engine.warm_up()
            log.info("ready: provider %s, variants %s", engine.runtime.provider, engine.runtime.variants)
            yield
        finally:
            await engine.batcher.stop()  # admitted work is finished first
            app.state.engine = None
            for executor in executors:
                executor.shutdown(wait=True)

    return lifespan


def start_engine(settings: Settings, runtime: Runtime, metrics: Metrics) -> tuple[Engine, list[ThreadPoolExecutor]]:
    runs = settings.graph_runs
    graphs = ThreadPoolExecutor(runs, thread_name_prefix="attnserve-graph")  # one thread per graph run in flight
    cpu = ThreadPoolExecutor(2, thread_name_prefix="attnserve-cpu")  # tokenising and post-processing
    limits = BatchLimits(
        settings.max_batch_tokens, settings.max_batch_size, settings.max_queue, settings.queue_timeout_s,
        settings.batch_wait_ms / 1000, runs,
    )
    batcher = Batcher(runtime.run_batch, limits, graphs, metrics)
    batcher.start()
    engine_limits = EngineLimits(
        settings.max_inputs, settings.max_input_chars, settings.truncate, settings.attention_cap_bytes,
        settings.max_chunked_input_chars, settings.max_windows_per_input, settings.embed_all_cap_bytes,
    )
    return Engine(runtime, batcher, engine_limits, cpu, metrics), [graphs, cpu]


def to_service_error(exc: Exception) -> ServiceError:
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, RequestValidationError):
        return InvalidRequest(_describe(exc), code="validation_error")
    if isinstance(exc, StarletteHTTPException):
        return for_status(exc.status_code, str(exc.detail))
    raise TypeError(f"not a handled error type: {type(exc).__name__}")


async def handle_error(request: Request, exc: Exception) -> Response:
    """The one exception handler: any handled error -> its status and the one JSON body."""
    error = to_service_error(exc)
    headers = dict(error.headers())
    if isinstance(exc, StarletteHTTPException) and exc.headers:
        headers.update(exc.headers)  # e.g. Allow on 405
    return Response(error_body(error), status_code=error.status, headers=headers, media_type="application/json")


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)
