"""Operations: GET /health (live), /ready (every model warm and its last inference fine), /info, /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from inference.prompts import instruction_info
from inference.served import ServedModel
from service.dependencies import ModelsDep
from service.metrics import CONTENT_TYPE, Metrics
from service.routes.common import errors, json_response
from service.schemas import Status
from service.settings import Settings

router = APIRouter(tags=["operations"])

LIMITS = (
    "max_inputs", "max_input_chars", "truncate", "max_batch_tokens", "max_batch_size", "max_queue",
    "queue_timeout_s", "attention_cap_bytes", "payload_limit_bytes",
    "max_chunked_input_chars", "max_windows_per_input", "embed_all_cap_bytes",
    "bulk_share", "bulk_queue_share", "cache_bytes", "max_image_bytes", "max_image_pixels",
)


@router.get("/health", response_model=Status)
async def health() -> Response:
    """Alive: 200 while the process runs."""
    return json_response({"status": "ok"})


@router.get("/ready", response_model=Status, responses=errors(503))
async def ready(models: ModelsDep) -> Response:
    """200 once every model is warm and while its inference works; 503 otherwise (after a failure, a probe
    run decides)."""
    await models.check_ready()
    return json_response({"status": "ready"})


@router.get("/info", responses=errors(401, 503))
async def info(request: Request, models: ModelsDep) -> Response:
    """The default model (bundle version and hashes, provider, variants), every served model under `models`
    (each with its served `name`, its `adapters`: the tasks a request may name, and its character caps), and the
    limits (per model: each has its own admission permits; the character caps are the default model's)."""
    settings: Settings = request.app.state.settings
    listed = [{"name": served.name, **model_info(served)} for served in models]
    limits = {name: getattr(settings, name) for name in LIMITS} | char_caps(models.default)
    return json_response({**model_info(models.default), "models": listed, "limits": limits})


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE)


def model_info(served: ServedModel) -> dict[str, Any]:
    """A served model's bundle (version, hashes, sizes, labels), its fingerprint (the model build: what the
    answer cache keys by) and how it is served (provider, variants, why)."""
    bundle, m = served.bundle, served.bundle.manifest
    return {
        "model": m.name, "version": m.version, "created_at": m.created_at, "source": m.source.kind,
        "fingerprint": served.fingerprint, "provider": bundle.provider, "variants": bundle.variants,
        "variant": {"served": bundle.variants.get("fast"), "reason": bundle.variant_reason},
        "graphs": [{"file": g.file, "kind": g.kind, "variant": g.variant, "sha256": g.sha256} for g in m.graphs],
        "tokenizer_sha256": m.tokenizer_sha256, "pooling": m.pooling, "normalize": m.normalize,
        "modalities": list(served.modalities),  # what it reads: text (token ids), image (pixel values) or both
        "image": images.image.model_dump() if (images := served.for_images().bundle.manifest).image else None,
        "pair": m.pair.model_dump() if m.pair is not None else None,  # a two-tower model's scale, bias and scoring
        "image_tower": image_tower(served),
        "architecture": m.architecture, "task": m.task, "tasks": sorted(served.tasks), "hidden_size": m.hidden_size,
        "embedding_size": m.embedding_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
        "max_length": m.max_length, "attention_windows": m.attention_windows, "causal": m.causal,
        "labels": list(m.labels),
        "prompts": m.prompts, "default_prompt_name": m.default_prompt_name,
        "instruction": instruction_info(m.prompts),
        "adapters": list(served.adapters),  # the LoRA adapters a request's `task` (or a name base:task) may name
        **char_caps(served),
    }


def image_tower(served: ServedModel) -> dict[str, Any] | None:
    """A two-tower model's image tower: its layers, heads and tokens an image, and its variants (the explorer draws
    its maps over an image's patches); None for every other model."""
    if served.image_tower is None:
        return None
    tower = served.image_tower.bundle
    m = tower.manifest
    return {"num_layers": m.num_layers, "num_heads": m.num_heads, "hidden_size": m.hidden_size,
            "max_length": m.max_length, "variants": tower.variants, "tasks": sorted(served.image_tower.tasks)}


def char_caps(served: ServedModel) -> dict[str, int | None]:
    """The model's character caps: the settings, or where unset their defaults for its max length."""
    return {name: getattr(served.limits, name) for name in ("max_input_chars", "max_chunked_input_chars")}
