"""OpenAI-compatible embeddings: POST /v1/embeddings (works with the official `openai` client)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from service.dependencies import JobDep, ModelsDep, PickDep, require_json
from service.engine import Engine
from service.postprocess import base64_floats
from service.routes.common import INFERENCE_ERRORS, errors, json_response, pooled_overlap
from service.schemas import OpenAIEmbeddingRequest, OpenAIEmbeddingResponse, OpenAIModelList

router = APIRouter(tags=["openai"])


@router.post(
    "/v1/embeddings", response_model=OpenAIEmbeddingResponse, responses=errors(*INFERENCE_ERRORS),
    dependencies=[Depends(require_json)], summary="Embeddings, OpenAI style",
)
async def create_embeddings(body: OpenAIEmbeddingRequest, pick: PickDep, job: JobDep) -> Response:
    """One embedding per input; with chunking=windows, one per window of each input, in order, each with
    its `input_index` and span. `usage` counts the tokens run (every window's, special tokens included)."""
    engine = pick(body.model)
    inputs: list[Any] = [body.input] if isinstance(body.input, str) or _is_id_list(body.input) else body.input
    data, tokens = await job(_data(engine, body, inputs))
    return json_response({
        "object": "list", "data": data, "model": body.model or engine.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })


@router.get("/v1/models", response_model=OpenAIModelList, responses=errors(401, 503),
            summary="The served models, OpenAI style")
async def list_models(models: ModelsDep) -> Response:
    """Every served model, in the order the bundles were given (the first is the default)."""
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "attnserve"} for name in models.names]
    return json_response({"object": "list", "data": data})


async def _data(engine: Engine, body: OpenAIEmbeddingRequest, inputs: list[Any]) -> tuple[list[dict[str, Any]], int]:
    encode = base64_floats if body.encoding_format == "base64" else (lambda v: v)
    normalize = engine.runtime.manifest.normalize
    if body.chunking == "windows":
        windows, tokens = await engine.embed_windows(
            inputs, overlap=body.chunk_overlap, normalize=normalize, dimensions=body.dimensions,
        )
        flat = [(i, w) for i, input_windows in enumerate(windows) for w in input_windows]
        return [
            {"object": "embedding", "index": k, "input_index": i, **{**w, "embedding": encode(w["embedding"])}}
            for k, (i, w) in enumerate(flat)
        ], tokens
    vectors, tokens = await engine.embed(
        inputs, truncate=None, direction="right", normalize=normalize, dimensions=body.dimensions,
        overlap=pooled_overlap(body),
    )
    return [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)], tokens


def _is_id_list(value: object) -> bool:
    """One input given as token ids: a non-empty list of ints."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], int)
