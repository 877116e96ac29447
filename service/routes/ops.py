"""Operations: GET /health (live), /ready (warm and last inference fine), /info, /metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.dependencies import EngineDep
from service.errors import NotReady
from service.metrics import CONTENT_TYPE, Metrics
from service.routes.common import errors, json_response
from service.schemas import Status
from service.settings import Settings

router = APIRouter(tags=["operations"])

LIMITS = (
    "max_inputs", "max_input_chars", "truncate", "max_batch_tokens", "max_batch_size", "max_queue",
    "queue_timeout_s", "attention_cap_bytes", "payload_limit_bytes",
    "max_chunked_input_chars", "max_windows_per_input", "embed_all_cap_bytes",
)


@router.get("/health", response_model=Status)
async def health() -> Response:
    """Alive: 200 while the process runs."""
    return json_response({"status": "ok"})


@router.get("/ready", response_model=Status, responses=errors(503))
async def ready(engine: EngineDep) -> Response:
    """200 once warm and while inference works; 503 otherwise (after a failure, a probe run decides)."""
    if not await engine.check_ready():
        raise NotReady("warming up" if not engine.warm else "the last inference failed")
    return json_response({"status": "ready"})


@router.get("/info", responses=errors(401, 503))
async def info(request: Request, engine: EngineDep) -> Response:
    """Model, bundle version and hashes, provider, variants, limits."""
    settings: Settings = request.app.state.settings
    return json_response({**engine.info(), "limits": {name: getattr(settings, name) for name in LIMITS}})


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE)
