"""Sparse vectors: text-embeddings-inference's POST /embed_sparse, for masked-LM (SPLADE) bundles."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from inference.tasks import sparse as core
from service import wire
from service.dependencies import JobDep, ModelQuery, PickDep, needs, require_json
from service.head_schemas import EmbedSparseRequest, SparseValue
from service.routes.common import INFERENCE_ERRORS, as_list, direction, errors, json_response

router = APIRouter(tags=["text-embeddings-inference"],
                   dependencies=[Depends(require_json), Depends(needs("sparse"))])


@router.post("/embed_sparse", response_model=list[list[SparseValue]], responses=errors(*INFERENCE_ERRORS))
async def embed_sparse(body: EmbedSparseRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, its SPLADE vector's nonzero entries `{index, value}` in vocabulary order (the top_k largest
    when asked)."""
    served = pick(body.model, model, adapter=body.task)
    result = await job(core.embed_sparse(served, as_list(body.inputs), truncate=body.truncate,
                                         direction=direction(body), top_k=body.top_k))
    return json_response([wire.sparse(v) for v in result.vectors])
