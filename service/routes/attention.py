"""POST /attention: tokens and attention maps over real tokens, selected and aggregated; an image model's over the
image's tokens (class token, registers, patches), placed by the answer's `grid`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Response

from inference.errors import InvalidRequest
from inference.limits import AttentionQuery
from inference.results import AttentionMap
from inference.served import ServedModel
from inference.tasks import attention as core
from service.attention_schemas import AttentionRequest, AttentionResponse
from service.dependencies import Job, JobDep, ModelQuery, PickDep, needs, require_json
from service.images import fetching, image_inputs, refuse_text_fields
from service.routes.common import INFERENCE_ERRORS, as_list, direction, errors, json_response
from service.wire import attention_item

router = APIRouter(tags=["attention"], dependencies=[Depends(require_json)])


@router.post("/attention", response_model=AttentionResponse, responses=errors(*INFERENCE_ERRORS),
             dependencies=[Depends(needs("attention"))])
async def attention(body: AttentionRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Attention maps of texts, or of an image model's images (GET /info: `modalities`): data URIs
    (data:image/png;base64,...) or {"image": data URI or base64} items, PNG, JPEG, WebP or GIF, as the embedding routes
    take them; a request holds texts or images, not both. An image's maps are over its class token, registers and
    patches (the answer's `grid` says where each patch lies); rollout's row 0 is the rollout from the class token.
    Texts' fields (truncate, task) are refused with images (422 not_for_images); an image sent to a text model is
    refused (422 unsupported), and so is a text sent to an image model (422 invalid_image). Requests whose response
    would pass the attention cap are refused (422) before any work."""
    served = pick(body.model, model)
    query = AttentionQuery(body.layers, body.heads, body.aggregation, body.encoding, body.dtype)
    images = await fetching(lambda: image_inputs(as_list(body.inputs), served.modalities))
    if images is not None:
        refuse_text_fields(body)
        return json_response(await _image_answer(served, only_images(images), query, job))
    served = served.with_adapter(body.task)
    maps = await job(core.attention(served, as_list(body.inputs), query, truncate=body.truncate,
                                    direction=direction(body)))
    return json_response(_answer(served, query, maps))


async def _image_answer(served: ServedModel, images: list[bytes], query: AttentionQuery, job: Job[Any]) -> Any:
    """An image model's answer: the text answer's fields and the grid its tokens lie on."""
    grid, maps = await job(core.image_attention(served, images, query))
    return {**_answer(served, query, maps), "grid": asdict(grid)}


def only_images(inputs: list[bytes | str]) -> list[bytes]:
    """The images of a request of images; InvalidRequest naming the first text beside them (a two-tower model reads
    both, but one request's maps are of one tower)."""
    for index, item in enumerate(inputs):
        if isinstance(item, str):
            raise InvalidRequest(f"input {index} is a text beside images: /attention takes texts or images in one "
                                 "request, not both", code="mixed_inputs")
    return [item for item in inputs if isinstance(item, bytes)]


def _answer(served: ServedModel, query: AttentionQuery, maps: list[AttentionMap]) -> dict[str, Any]:
    return {
        "model": served.name, "aggregation": query.aggregation, "encoding": query.encoding,
        "dtype": query.dtype if query.encoding == "base64" else "float32",
        "data": [attention_item(m, query.encoding, query.dtype) for m in maps],
    }
