"""OpenAI-compatible embeddings: POST /v1/embeddings (works with the official `openai` client)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from inference.prompts import instruction_info
from inference.results import grouped
from inference.served import ServedModel
from inference.tasks import embed
from service.dependencies import Job, JobDep, ModelsDep, PickDep, require_json
from service.hot import HotRoute
from service.images import fetching, modality_inputs, refuse_text_fields
from service.openai_schemas import OpenAIEmbeddingRequest, OpenAIEmbeddingResponse, OpenAIModelList
from service.routes.common import INFERENCE_ERRORS, chunking, errors, json_response
from service.uploads import Upload
from service.wire import base64_floats, span

router = APIRouter(tags=["openai"])


@router.post(
    "/v1/embeddings", response_model=OpenAIEmbeddingResponse, responses=errors(*INFERENCE_ERRORS),
    dependencies=[Depends(require_json)], summary="Embeddings, OpenAI style",
)
async def create_embeddings(body: OpenAIEmbeddingRequest, pick: PickDep, job: JobDep) -> Response:
    """One embedding per input, of the text after the prompt `input_type` chooses (default: the model's default
    prompt); with chunking=windows, one per window of each input, in order, each with its `input_index` and span.
    `usage` counts the tokens run (every window's, special tokens and the prompt's included)."""
    return json_response(await embeddings_answer(body, pick(body.model, adapter=body.task), job))


async def embeddings_answer(body: OpenAIEmbeddingRequest, served: ServedModel, job: Job[Any]) -> Any:
    inputs: list[Any] = [body.input] if isinstance(body.input, str) or _is_id_list(body.input) else body.input
    images = await fetching(lambda: modality_inputs(inputs, served.modalities, body.modality))
    run = _data(served, body, inputs) if images is None else _image_data(served, body, images)
    data, tokens = await job(run)
    return {
        "object": "list", "data": data, "model": body.model or served.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


# Answered on the short path when well formed (service.hot); the model is named by the body only.
HOT = (HotRoute("/v1/embeddings", OpenAIEmbeddingRequest, embeddings_answer, model_query=False),)
UPLOADS = (Upload("/v1/embeddings", OpenAIEmbeddingRequest, "input"),)  # images as multipart (service.uploads)


@router.get("/v1/models", response_model=OpenAIModelList, responses=errors(401, 503),
            summary="The served models, OpenAI style")
async def list_models(models: ModelsDep) -> Response:
    """Every served model, in the order the bundles were given (the first is the default), with what it can
    be asked (`tasks`: embed, classify, rerank, sparse, tokens, attention, embed_all), its prompts, its
    fingerprint and its LoRA `adapters`; after each model with adapters, `name:adapter` for each of them (that
    model running that adapter: send it as `model`)."""
    data = [entry for m in models for entry in _listed(m)]
    return json_response({"object": "list", "data": data})


def _listed(m: ServedModel) -> list[dict[str, Any]]:
    """The model's /v1/models entries: itself, then `name:adapter` for each adapter (`adapter` says which)."""
    manifest = m.bundle.manifest
    entry = {"id": m.name, "object": "model", "created": 0, "owned_by": "attnserve", "tasks": sorted(m.tasks),
             "fingerprint": m.fingerprint, "prompts": manifest.prompts,
             "default_prompt_name": manifest.default_prompt_name, "instruction": instruction_info(manifest.prompts),
             "adapters": list(m.adapters), "adapter": None}
    return [entry, *({**entry, "id": f"{m.name}:{name}", "adapter": name} for name in m.adapters)]


async def _data(
    served: ServedModel, body: OpenAIEmbeddingRequest, inputs: list[Any],
) -> tuple[list[dict[str, Any]], int]:
    encode = base64_floats if body.encoding_format == "base64" else (lambda v: v)
    result = await embed.embed(served, inputs, normalize=served.bundle.manifest.normalize,
                               dimensions=body.dimensions, chunked=chunking(body, served),
                               prompt_name=body.prompt_name, input_type=body.input_type, instruction=body.instruction)
    if result.spans is None:
        return [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(result.vectors)], \
            result.tokens
    flat = [(i, w, row) for i, windows in enumerate(grouped(result.vectors, result.spans)) for w, row in windows]
    return [
        {"object": "embedding", "index": k, "input_index": i, **span(w), "embedding": encode(row)}
        for k, (i, w, row) in enumerate(flat)
    ], result.tokens


async def _image_data(
    served: ServedModel, body: OpenAIEmbeddingRequest, images: list[bytes | str],
) -> tuple[list[dict[str, Any]], int]:
    """One embedding per image (and per text beside them, for a two-tower model), in order; `usage` counts each
    image's tokens (its patches, class token, registers) and each text's."""
    refuse_text_fields(body)
    encode = base64_floats if body.encoding_format == "base64" else (lambda v: v)
    result = await embed.embed_images(served, images, normalize=served.bundle.manifest.normalize,
                                      dimensions=body.dimensions)
    return [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(result.vectors)], \
        result.tokens


def _is_id_list(value: object) -> bool:
    """One input given as token ids: a non-empty list of ints."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], int)
