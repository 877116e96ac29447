"""Token classification: POST /classify_tokens, answered as transformers' token-classification pipeline
answers (text-embeddings-inference has no such route; the shape is the pipeline's)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from inference.tasks import token_labels as core
from service import wire
from service.dependencies import JobDep, ModelQuery, PickDep, needs, require_json
from service.head_schemas import ClassifyTokensRequest, TokenEntity
from service.routes.common import INFERENCE_ERRORS, as_list, errors, given, json_response

router = APIRouter(tags=["token classification"], dependencies=[Depends(require_json), Depends(needs("tokens"))])


@router.post("/classify_tokens", response_model=list[list[TokenEntity]], responses=errors(*INFERENCE_ERRORS))
async def classify_tokens(body: ClassifyTokensRequest, pick: PickDep, job: JobDep,
                          model: ModelQuery = None) -> Response:
    """Per input, its labelled tokens (aggregation none: `entity`, `index`) or entity groups (`entity_group`),
    label "O" left out, with `start` and `end` in characters of the input. Long inputs are cut into windows."""
    served = pick(body.model, model, adapter=body.task)
    result = await job(core.classify_tokens(served, as_list(body.inputs), aggregation=body.aggregation,
                                            overlap=given(body, "chunk_overlap")))
    grouped = body.aggregation != "none"
    return json_response([[wire.entity(e, grouped) for e in entities] for entities in result])
