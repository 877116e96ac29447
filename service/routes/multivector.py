"""Late interaction: Jina's POST /v1/multi-vector, a multi-vector model's token vectors (ColBERT's, bge-m3's
colbert_vecs) for a query or a document (their size is checked against embed_all_cap_bytes before any graph runs),
and POST /maxsim, a query against a document token by token: the map the explorer draws."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from inference.tasks import multi_vector as core
from service.dependencies import JobDep, PickDep, needs, require_json
from service.head_schemas import MaxSimRequest, MaxSimResponse, MultiVectorRequest, MultiVectorResponse
from service.routes.common import INFERENCE_ERRORS, as_list, direction, errors, json_response
from service.wire import base64_floats

router = APIRouter(tags=["multi-vector"], dependencies=[Depends(require_json), Depends(needs("multi_vector"))])


@router.post("/v1/multi-vector", response_model=MultiVectorResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Token vectors for late interaction, Jina style")
async def multi_vector(body: MultiVectorRequest, pick: PickDep, job: JobDep) -> Response:
    """Per input, its token vectors as the model keeps them for a query or a document (`input_type`), each cut to
    `dimensions` when asked; `usage` counts the tokens run."""
    served = pick(body.model, adapter=body.task)
    found = await job(core.encode(served, as_list(body.input), input_type=body.input_type,
                                  dimensions=body.dimensions, truncate=body.truncate, direction=direction(body)))
    assert found.multi is not None  # asked for
    encode = (lambda rows: [base64_floats(row) for row in rows]) if body.embedding_type == "base64" else _floats
    data = [{"object": "embeddings", "index": i, "embeddings": encode(rows)} for i, rows in enumerate(found.multi)]
    return json_response({"object": "list", "model": body.model or served.name, "data": data,
                          "usage": {"total_tokens": found.tokens, "prompt_tokens": found.tokens}})


def _floats(rows: Any) -> Any:
    return rows  # orjson writes the (k, M) float32 array as nested lists


@router.post("/maxsim", response_model=MaxSimResponse, responses=errors(*INFERENCE_ERRORS),
             summary="A query against a document, token by token (late interaction)")
async def maxsim(body: MaxSimRequest, pick: PickDep, job: JobDep) -> Response:
    """Every query token's cosine with every document token (those with a vector), each query token's best match
    and the score the rerank routes give the pair; a model with token weights (bge-m3) gives each token's weight."""
    served = pick(body.model, adapter=body.task)
    found = await job(core.maxsim_map(served, body.query, body.document, truncate=body.truncate,
                                      direction=direction(body)))
    return json_response({
        "model": body.model or served.name, "similarities": found.similarities, "best": found.best.tolist(),
        "query_tokens": [t.__dict__ for t in found.query], "document_tokens": [t.__dict__ for t in found.document],
        "score": found.score, "reduction": found.reduction,
        "usage": {"total_tokens": found.tokens, "prompt_tokens": found.tokens},
    })
