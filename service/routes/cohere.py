"""Cohere's embed: POST /v2/embed (the Cohere SDK's ClientV2.embed), texts (or an image model's images, or inputs of
one part each: a two-tower model's texts and images in one request) in, each
embedding in every asked encoding (`embedding_types`: float, base64, and the quantised ones of inference.quantize;
int8 and uint8, whose ranges are calibrated on texts, not for images)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Response

from inference.errors import InvalidRequest
from inference.prompts import InputType
from inference.results import Embeddings
from inference.served import ServedModel
from inference.tasks import embed
from inference.tasks.quantized import quantized
from service.cohere_schemas import CohereEmbedRequest, CohereEmbedResponse, CohereText
from service.dependencies import JobDep, PickDep, require_json
from service.images import decoded
from service.routes.common import INFERENCE_ERRORS, errors, json_response
from service.wire import base64_floats

router = APIRouter(tags=["cohere"], dependencies=[Depends(require_json)])
INPUT_TYPES: dict[str, InputType] = {"search_query": "query", "search_document": "document",
                                     "classification": "classification", "clustering": "clustering"}
TRUNCATE = {"END": (True, "right"), "START": (True, "left"), "NONE": (False, "right")}  # (truncate, direction)


@router.post("/v2/embed", response_model=CohereEmbedResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Embeddings, Cohere (v2) style")
async def cohere_embed(body: CohereEmbedRequest, pick: PickDep, job: JobDep) -> Response:
    """One embedding per text (or image, or input of one part) in each of `embedding_types`, under `embeddings` by
    type; `meta.billed_units` counts the tokens run. Refused by name (422): max_tokens, priority; int8 and uint8 for
    images; an input of several parts."""
    served = pick(body.model)
    embeddings, tokens = await job(_embeddings(served, body))
    return json_response({
        "id": str(uuid.uuid4()), "response_type": "embeddings_by_type", "embeddings": embeddings,
        "texts": body.texts, "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
    })


async def _embeddings(served: ServedModel, body: CohereEmbedRequest) -> tuple[dict[str, Any], int]:
    normalize = served.bundle.manifest.normalize
    texts, images = _parts(body)
    if images is not None:
        result = await _images(served, body, images, normalize)
    else:
        truncate, direction = TRUNCATE[body.truncate]
        result = await embed.embed(
            served, texts, truncate=truncate, direction=direction,  # type: ignore[arg-type]
            normalize=normalize, dimensions=body.output_dimension,
            input_type=INPUT_TYPES[body.input_type] if body.input_type else None)
    answers: dict[str, Any] = {}
    for kind in dict.fromkeys(body.embedding_types):  # each asked type once, in the order asked
        if kind == "float":
            answers[kind] = result.vectors
        elif kind == "base64":
            answers[kind] = [base64_floats(row) for row in result.vectors]
        else:
            answers[kind] = (await quantized(served, result.vectors, kind, body.output_dimension, normalize)).tolist()
    return answers, result.tokens


def _parts(body: CohereEmbedRequest) -> tuple[list[str] | None, list[bytes | str] | None]:
    """(texts, None) for a request of texts (`texts`, or `inputs` of text parts only); (None, items) for one holding
    images: each image's bytes and, beside them in `inputs`, each text as given (a two-tower model's)."""
    if body.images is not None:
        return None, [decoded(uri, index) for index, uri in enumerate(body.images)]
    if body.inputs is None:
        return body.texts, None
    parts = [one.content[0] for one in body.inputs]
    if all(isinstance(part, CohereText) for part in parts):
        return [part.text for part in parts], None  # type: ignore[union-attr]
    return None, [part.text if isinstance(part, CohereText) else decoded(part.image_url.url, index)
                  for index, part in enumerate(parts)]


async def _images(served: ServedModel, body: CohereEmbedRequest, images: list[bytes | str],
                  normalize: bool) -> Embeddings:
    """An image model's embeddings of the request's images (and a two-tower model's texts beside them); int8 and
    uint8 refused by name before any run, and input_type other than image."""
    if calibrated := [kind for kind in body.embedding_types if kind in ("int8", "uint8")]:
        raise InvalidRequest(f"embedding_types {', '.join(dict.fromkeys(calibrated))} are not answered for images: "
                             "their ranges are calibrated on texts; ask for float, base64, binary or ubinary",
                             code="not_for_images")
    if "truncate" in body.model_fields_set and body.truncate != "END":
        raise InvalidRequest("truncate applies to texts, not to images", code="not_for_images")
    if body.input_type not in (None, "image"):
        raise InvalidRequest(f"input_type {body.input_type} applies to texts; a request holding images takes "
                             "input_type image or none", code="not_for_images")
    return await embed.embed_images(served, images, normalize=normalize, dimensions=body.output_dimension)
