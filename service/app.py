"""The app factory: `create_app(settings)` wires routes, middleware, the one exception handler, the callers
(their keys: ATTNSERVE_API_KEY, ATTNSERVE_API_KEYS_FILE, read here so a bad file stops the start) and the
lifespan (load and verify the bundles, start the served models with one batcher each, warm up, watch the keys
file; on shutdown drain admitted work)."""

from __future__ import annotations

import gc
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
from inference.registry import ModelRegistry, load_bundles, served_names, start_models
from inference.runtime.loading import LoadedBundle
from inference.scheduling.fairqueue import Priority
from service.callers import Callers, single_key
from service.errors import describe_validation, error_body_for, for_status, headers_of, status_of
from service.fetch import fetcher_of
from service.hot import HotRoutes
from service.keysfile import KeysFile
from service.metrics import Metrics
from service.middleware import CACHED_HEADER, FINGERPRINT_HEADER, TIMING_HEADERS, EdgeMiddleware, Scope
from service.oip import routes as oip
from service.openapi import bounds, served_document
from service.routes import (
    attention,
    cohere,
    explore,
    multivector,
    openai,
    ops,
    rerank,
    sparse,
    tei,
    token_labels,
    zero_shot,
)
from service.settings import Settings
from service.uploads import ImageRequests

log = logging.getLogger(__name__)
ADMITTED_PATHS = frozenset({  # routes that use the batcher (POST / embeds or compares)
    "/embed", "/classify", "/attention", "/v1/embeddings", "/predict", "/similarity", "/embed_all", "/",
    "/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score", "/embed_sparse", "/classify_tokens",
    "/v1/multi-vector", "/maxsim", "/v2/embed", "/zero-shot-image-classification",
})
UPLOADS = {upload.path: upload for upload in (*tei.UPLOADS, *openai.UPLOADS, *zero_shot.UPLOADS)}  # multipart too
V2_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/infer$")  # and these, naming their model


def create_app(settings: Settings, loaded: LoadedBundle | Sequence[LoadedBundle] | None = None) -> FastAPI:
    """The ASGI app. The loaded bundles may be given, one per bundle of `settings` (the CLI loads them first,
    tests inject fakes); else the lifespan loads the bundles named by `settings`."""
    metrics = Metrics()
    bundles = [loaded] if isinstance(loaded, LoadedBundle) else loaded
    callers, keys_file = _callers(settings, metrics)
    # FastAPI's own OpenTelemetry hooks are off: attnserve's telemetry is /metrics and the timing headers, and
    # with the hooks on, every request asks the OpenTelemetry globals (an environment read) whether to trace.
    app = FastAPI(title="attnserve", version=__version__, telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.settings, app.state.metrics, app.state.models = settings, metrics, None  # models: once started
    app.state.callers = callers
    for module in (openai, cohere, tei, rerank, sparse, multivector, token_labels, attention, zero_shot, ops, oip,
                   explore):
        app.include_router(module.router)
    # The app's lifespan, set after the routers: each include_router wraps the lifespan in one more layer (for the
    # routers' own, which ours have none of), and a failed start-up's traceback then ran to pages of those frames.
    app.router.lifespan_context = _lifespan(settings, bundles, metrics, keys_file)
    app.openapi = _served_openapi(app)  # type: ignore[method-assign]
    for exc_type in (InferenceError, StarletteHTTPException, RequestValidationError):
        app.add_exception_handler(exc_type, handle_error)
    hot = {route.path: route for route in (*tei.HOT, *openai.HOT, *rerank.HOT)}
    # inside CORS and the edge, before FastAPI's own layers
    app.add_middleware(HotRoutes, routes=hot, models=lambda: app.state.models, render=render_error)
    app.add_middleware(ImageRequests, uploads=UPLOADS, models=lambda: app.state.models, fetcher=fetcher_of(settings),
                       render=render_error)  # multipart images as JSON; image URLs (service.uploads, service.fetch)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID", "X-Priority"],
            expose_headers=["X-Request-ID", "Retry-After", *TIMING_HEADERS, CACHED_HEADER, FINGERPRINT_HEADER],
        )
    app.add_middleware(EdgeMiddleware, payload_limit_bytes=settings.payload_limit_bytes, metrics=metrics,
                       callers=callers, batched=batched, busy=lambda scope, priority: _busy(app, scope, priority),
                       body_timeout_s=settings.body_timeout_s)
    return app


def _callers(settings: Settings, metrics: Metrics) -> tuple[Callers, KeysFile | None]:
    """The callers in force at start (StartupError when the keys file cannot be used), and the keys file to
    watch, if any."""
    callers = Callers()
    single = single_key(settings.api_key.get_secret_value()) if settings.api_key is not None else None
    if settings.api_keys_file is None:
        if single is not None:
            callers.replace([single])
        return callers, None
    keys_file = KeysFile(settings.api_keys_file, callers, metrics, single)
    keys_file.load()
    metrics.keys_read(True, len(callers.keys or []))
    return callers, keys_file


def batched(scope: Scope) -> bool:
    """A route that uses the batcher (so admits, queues and spends tokens): refused early when busy, and
    when its caller's budget is spent."""
    return scope["method"] == "POST" and (scope["path"] in ADMITTED_PATHS or V2_INFER.match(scope["path"]) is not None)


def _served_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The routes' document, and once the models are served, what they accept (service.openapi), made once."""
    routes_document = app.openapi

    def openapi() -> dict[str, Any]:
        models: ModelRegistry | None = app.state.models
        if models is None:
            return routes_document()
        if getattr(app.state, "served_openapi", None) is None:
            settings: Settings = app.state.settings
            app.state.served_openapi = served_document(routes_document(), bounds(models), settings.max_inputs,
                                                       UPLOADS.values())
        return app.state.served_openapi  # type: ignore[no-any-return]

    return openapi


def _busy(app: FastAPI, scope: Scope, priority: Priority) -> bool:
    """Refuse before reading the body: a batched route whose model (named in the URL, or any model when
    only the body can name it) has no free permit for the caller's class."""
    models: ModelRegistry | None = app.state.models
    infer = V2_INFER.match(scope["path"])
    if models is None:
        return False
    if infer:
        return models.busy(infer.group(1), priority)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("model")
    return models.busy(query[-1] if query else None, priority)


def _lifespan(
    settings: Settings, bundles: Sequence[LoadedBundle] | None, metrics: Metrics, keys_file: KeysFile | None,
) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = bundles or load_bundles(settings.bundle, settings.load_options())
        models, executors = start_models(served_names(settings.bundle, loaded), loaded, settings, metrics.for_model)
        app.state.models = models
        if keys_file is not None:
            keys_file.start(settings.api_keys_check_s)
        try:
            for model in models:
                await model.warm_up()
                log.info("ready: %s on %s, variants %s", model.name, model.bundle.provider, model.bundle.variants)
            settle_heap()
            yield
        finally:
            if keys_file is not None:
                await keys_file.stop()
            for model in models:
                await model.stop()  # admitted work is finished first
            app.state.models = app.state.served_openapi = None
            for executor in executors:
                executor.shutdown(wait=True)

    return lifespan


def settle_heap() -> None:
    """Collect, then move every object that start-up made (modules, the app, sessions, tokenizers) out of the
    collector's generations for good (`gc.freeze`). A full collection under load otherwise traversed them all on
    the event loop, every few seconds under overload: the stalls in the overload check's p99 (docs/reliability.md
    measures them). What requests allocate is still collected as before."""
    gc.collect()
    gc.freeze()


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
