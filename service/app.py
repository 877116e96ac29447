"""The app factory: `create_app(settings)` wires routes, middleware, the one exception handler and the
lifespan (load and verify the bundles, start one batcher per model, warm up; on shutdown drain admitted
work)."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from attnserve import __version__
from service.errors import InvalidRequest, ServiceError, error_body_for, for_status
from service.metrics import Metrics
from service.middleware import EdgeMiddleware, Scope
from service.models import Models, load_runtimes, start_models
from service.routes import attention, explore, openai, ops, tei, v2
from service.runtime import Runtime
from service.settings import Settings
from service.timing import HEADERS as TIMING_HEADERS

log = logging.getLogger(__name__)
ADMITTED_PATHS = frozenset({  # routes that use the batcher (POST / embeds or compares)
    "/embed", "/classify", "/attention", "/v1/embeddings", "/predict", "/similarity", "/embed_all", "/",
})
V2_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/infer$")  # and these, naming their model


def create_app(settings: Settings, runtime: Runtime | Sequence[Runtime] | None = None) -> FastAPI:
    """The ASGI app. The runtimes may be given, one per bundle of `settings` (the CLI loads them first,
    tests inject fakes); else the lifespan loads the bundles named by `settings`."""
    metrics = Metrics()
    runtimes = [runtime] if isinstance(runtime, Runtime) else runtime
    app = FastAPI(title="attnserve", version=__version__, lifespan=_lifespan(settings, runtimes, metrics))
    # models: every served model; engine: the default one (the first bundle's), where unnamed requests go
    app.state.settings, app.state.metrics, app.state.models, app.state.engine = settings, metrics, None, None
    for module in (openai, tei, attention, ops, v2, explore):
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
                       api_key=api_key, busy=lambda scope: _busy(app, scope), body_timeout_s=settings.body_timeout_s)
    return app


def _busy(app: FastAPI, scope: Scope) -> bool:
    """Refuse before reading the body: a batched route whose model (named in the URL, or any model when
    only the body can name it) has no free permit."""
    models: Models | None = app.state.models
    path, infer = scope["path"], V2_INFER.match(scope["path"])
    if models is None or not (path in ADMITTED_PATHS or infer):
        return False
    if infer:
        return models.busy(infer.group(1))
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("model")
    return models.busy(query[-1] if query else None)


def _lifespan(settings: Settings, runtimes: Sequence[Runtime] | None, metrics: Metrics) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        models, executors = start_models(settings, runtimes or load_runtimes(settings), metrics)
        app.state.models, app.state.engine = models, models.default
        try:
            for engine in models:
                await engine.warm_up()
                log.info("ready: %s on %s, variants %s", engine.name, engine.runtime.provider, engine.runtime.variants)
            yield
        finally:
            for engine in models:
                await engine.batcher.stop()  # admitted work is finished first
            app.state.models = app.state.engine = None
            for executor in executors:
                executor.shutdown(wait=True)

    return lifespan


def to_service_error(exc: Exception) -> ServiceError:
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, RequestValidationError):
        return InvalidRequest(_describe(exc), code="validation_error")
    if isinstance(exc, StarletteHTTPException):
        return for_status(exc.status_code, str(exc.detail))
    raise TypeError(f"not a handled error type: {type(exc).__name__}")


async def handle_error(request: Request, exc: Exception) -> Response:
    """The one exception handler: any handled error -> its status and the one JSON body (for the path)."""
    error = to_service_error(exc)
    headers = dict(error.headers())
    if isinstance(exc, StarletteHTTPException) and exc.headers:
        headers.update(exc.headers)  # e.g. Allow on 405
    if error.status == 405:  # Starlette names only the first route on the path; "/" has GET and POST routes
        headers["Allow"] = ", ".join(_allowed_methods(request))
    body = error_body_for(request.scope["path"], error)
    return Response(body, status_code=error.status, headers=headers, media_type="application/json")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app fully matches on this request's path (asked of the router itself,
    so included routers count)."""
    routes = request.app.router.routes
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)]


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)
