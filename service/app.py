"""The app factory: `create_app(settings)` wires routes, middleware, the one exception handler and the
lifespan (load and verify the bundles, start the served models with one batcher each, warm up; on shutdown
drain admitted work)."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from attnserve import __version__
from inference.errors import InferenceError, InvalidRequest
from inference.loading import LoadedBundle
from inference.registry import ModelRegistry, load_bundles, served_names, start_models
from service.errors import describe_validation, error_body_for, for_status, headers_of, status_of
from service.hot import HotRoutes
from service.metrics import Metrics
from service.middleware import TIMING_HEADERS, EdgeMiddleware, Scope
from service.oip import routes as oip
from service.openapi import bounds, served_document
from service.routes import attention, explore, openai, ops, tei
from service.settings import Settings

log = logging.getLogger(__name__)
ADMITTED_PATHS = frozenset({  # routes that use the batcher (POST / embeds or compares)
    "/embed", "/classify", "/attention", "/v1/embeddings", "/predict", "/similarity", "/embed_all", "/",
})
V2_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/infer$")  # and these, naming their model


def create_app(settings: Settings, loaded: LoadedBundle | Sequence[LoadedBundle] | None = None) -> FastAPI:
    """The ASGI app. The loaded bundles may be given, one per bundle of `settings` (the CLI loads them first,
    tests inject fakes); else the lifespan loads the bundles named by `settings`."""
    metrics = Metrics()
    bundles = [loaded] if isinstance(loaded, LoadedBundle) else loaded
    # FastAPI's own OpenTelemetry hooks are off: attnserve's telemetry is /metrics and the timing headers, and
    # with the hooks on, every request asks the OpenTelemetry globals (an environment read) whether to trace.
    app = FastAPI(title="attnserve", version=__version__, lifespan=_lifespan(settings, bundles, metrics),
                  telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.settings, app.state.metrics, app.state.models = settings, metrics, None  # models: once started
    for module in (openai, tei, attention, ops, oip, explore):
        app.include_router(module.router)
    app.openapi = _served_openapi(app)  # type: ignore[method-assign]
    for exc_type in (InferenceError, StarletteHTTPException, RequestValidationError):
        app.add_exception_handler(exc_type, handle_error)
    hot = {route.path: route for route in (*tei.HOT, *openai.HOT)}
    # inside CORS and the edge, before FastAPI's own layers
    app.add_middleware(HotRoutes, routes=hot, models=lambda: app.state.models, render=render_error)
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


def _served_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The routes' document, and once the models are served, what they accept (service.openapi), made once."""
    routes_document = app.openapi

    def openapi() -> dict[str, Any]:
        models: ModelRegistry | None = app.state.models
        if models is None:
            return routes_document()
        if getattr(app.state, "served_openapi", None) is None:
            settings: Settings = app.state.settings
            app.state.served_openapi = served_document(routes_document(), bounds(models), settings.max_inputs)
        return app.state.served_openapi  # type: ignore[no-any-return]

    return openapi


def _busy(app: FastAPI, scope: Scope) -> bool:
    """Refuse before reading the body: a batched route whose model (named in the URL, or any model when
    only the body can name it) has no free permit."""
    models: ModelRegistry | None = app.state.models
    path, infer = scope["path"], V2_INFER.match(scope["path"])
    if models is None or not (path in ADMITTED_PATHS or infer):
        return False
    if infer:
        return models.busy(infer.group(1))
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("model")
    return models.busy(query[-1] if query else None)


def _lifespan(settings: Settings, bundles: Sequence[LoadedBundle] | None, metrics: Metrics) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = bundles or load_bundles(settings.bundle, settings.load_options())
        models, executors = start_models(served_names(settings.bundle, loaded), loaded, settings, metrics.for_model)
        app.state.models = models
        try:
            for model in models:
                await model.warm_up()
                log.info("ready: %s on %s, variants %s", model.name, model.bundle.provider, model.bundle.variants)
            yield
        finally:
            for model in models:
                await model.batcher.stop()  # admitted work is finished first
            app.state.models = app.state.served_openapi = None
            for executor in executors:
                executor.shutdown(wait=True)

    return lifespan


def to_domain_error(exc: Exception) -> InferenceError:
    if isinstance(exc, InferenceError):
        return exc
    if isinstance(exc, RequestValidationError):
        return InvalidRequest("invalid request: " + describe_validation(exc.errors()), code="validation_error")
    if isinstance(exc, StarletteHTTPException):
        return for_status(exc.status_code, str(exc.detail))
    raise TypeError(f"not a handled error type: {type(exc).__name__}")


async def handle_error(request: Request, exc: Exception) -> Response:
    """The one exception handler: any handled error -> its status and the one JSON body (for the path)."""
    status, headers, body = render_error(request.scope["path"], exc)
    if status == 405:  # Starlette names only the first route on the path; "/" has GET and POST routes
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def render_error(path: str, exc: Exception) -> tuple[int, dict[str, str], bytes]:
    """A handled error's status, headers and the one JSON body for `path` (also the short path's, service.hot)."""
    error = to_domain_error(exc)
    headers = headers_of(error)
    if isinstance(exc, StarletteHTTPException) and exc.headers:
        headers.update(exc.headers)  # e.g. Allow on 405
    return status_of(error)[0], headers, error_body_for(path, error)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app fully matches on this request's path (asked of the router itself,
    so included routers count)."""
    routes = request.app.router.routes
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)]
