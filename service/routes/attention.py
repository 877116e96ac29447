"""POST /attention: tokens and attention maps over real tokens, selected and aggregated."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from inference.limits import AttentionQuery
from inference.tasks import attention as core
from service.attention_schemas import AttentionRequest, AttentionResponse
from service.dependencies import JobDep, ModelQuery, PickDep, needs, require_json
from service.routes.common import INFERENCE_ERRORS, as_list, direction, errors, json_response
from service.wire import attention_item

router = APIRouter(tags=["attention"], dependencies=[Depends(require_json)])


@router.post("/attention", response_model=AttentionResponse, responses=errors(*INFERENCE_ERRORS),
             dependencies=[Depends(needs("attention"))])
async def attention(body: AttentionRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Attention maps; requests whose response would pass the attention cap are refused (422) before any work."""
    served = pick(body.model, model, adapter=body.task)
    query = AttentionQuery(body.layers, body.heads, body.aggregation, body.encoding, body.dtype)
    maps = await job(core.attention(served, as_list(body.inputs), query, truncate=body.truncate,
                                    direction=direction(body)))
    return json_response({
        "model": served.name, "aggregation": body.aggregation, "encoding": body.encoding,
        "dtype": body.dtype if body.encoding == "base64" else "float32",
        "data": [attention_item(m, body.encoding, body.dtype) for m in maps],
    })
