"""text-embeddings-inference compatible routes: POST /embed, /classify, /tokenize."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from service.dependencies import JobDep, ModelQuery, PickDep, require_json
from service.routes.common import INFERENCE_ERRORS, as_list, errors, json_response
from service.schemas import ClassifyRequest, EmbedRequest, LabelScore, Token, TokenizeRequest

router = APIRouter(tags=["text-embeddings-inference"], dependencies=[Depends(require_json)])


@router.post("/embed", response_model=list[list[float]], responses=errors(*INFERENCE_ERRORS))
async def embed(body: EmbedRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """One embedding per input (pooled; L2-normalised unless normalize=false)."""
    engine = pick(body.model, model)
    vectors, _ = await job(engine.embed(
        as_list(body.inputs), truncate=body.truncate, direction=body.truncation_direction.lower(),  # type: ignore[arg-type]
        normalize=body.normalize, dimensions=body.dimensions,
    ))
    return json_response(vectors)


@router.post("/classify", response_model=list[list[LabelScore]], responses=errors(*INFERENCE_ERRORS))
async def classify(body: ClassifyRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, labels with scores (softmax, or raw logits), best first."""
    engine = pick(body.model, model)
    scores = await job(engine.classify(
        as_list(body.inputs), truncate=body.truncate, direction=body.truncation_direction.lower(),  # type: ignore[arg-type]
        top_k=body.top_k, raw_scores=body.raw_scores,
    ))
    return json_response(scores)


@router.post("/tokenize", response_model=list[list[Token]], responses=errors(401, 404, 413, 415, 422, 503))
async def tokenize(body: TokenizeRequest, pick: PickDep, model: ModelQuery = None) -> Response:
    """Per input, its tokens with ids and character offsets (no truncation)."""
    engine = pick(body.model, model)
    return json_response(await engine.tokenize(as_list(body.inputs), body.add_special_tokens))
