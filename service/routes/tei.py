"""text-embeddings-inference compatible routes: POST /embed, /classify, /tokenize."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from service.dependencies import EngineDep, JobDep, require_json
from service.routes.common import INFERENCE_ERRORS, TOKENIZE_ERRORS, as_list, errors, json_response
from service.schemas import ClassifyRequest, EmbedRequest, LabelScore, Token, TokenizeRequest

router = APIRouter(tags=["text-embeddings-inference"], dependencies=[Depends(require_json)])


@router.post("/embed", response_model=list[list[float]], responses=errors(*INFERENCE_ERRORS))
async def embed(body: EmbedRequest, engine: EngineDep, job: JobDep) -> Response:
    """One embedding per input (pooled; L2-normalised unless normalize=false)."""
    vectors, _ = await job(engine.embed(
        as_list(body.inputs), truncate=body.truncate, direction=body.truncation_direction.lower(),  # type: ignore[arg-type]
        normalize=body.normalize, dimensions=body.dimensions,
    ))
    return json_response(vectors)


@router.post("/classify", response_model=list[list[LabelScore]], responses=errors(*INFERENCE_ERRORS))
async def classify(body: ClassifyRequest, engine: EngineDep, job: JobDep) -> Response:
    """Per input, labels with scores (softmax, or raw logits), best first."""
    scores = await job(engine.classify(
        as_list(body.inputs), truncate=body.truncate, direction=body.truncation_direction.lower(),  # type: ignore[arg-type]
        top_k=body.top_k, raw_scores=body.raw_scores,
    ))
    return json_response(scores)


@router.post("/tokenize", response_model=list[list[Token]], responses=errors(*TOKENIZE_ERRORS))
async def tokenize(body: TokenizeRequest, engine: EngineDep) -> Response:
    """Per input, its tokens with ids and character offsets (no truncation)."""
    return json_response(await engine.tokenize(as_list(body.inputs), body.add_special_tokens))
