"""Helpers shared by the route modules: JSON responses via orjson, documented error statuses."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Response
from pydantic import BaseModel

from inference import rules
from inference.chunking import Chunking
from inference.runtime.tokenize import Direction
from inference.served import ServedModel
from service.schemas import ErrorResponse

_DESCRIPTIONS = {
    401: "Missing or wrong API key",
    403: "The caller's key may not use this model (the keys file's `models`)",
    408: "Request body not received within ATTNSERVE_BODY_TIMEOUT_S; the connection is closed",
    413: "Request body over the payload limit",
    404: "No served model has the requested name (the message lists the served names)",
    415: "Request body is not JSON",
    422: "Invalid request: not what this document allows (code validation_error), or past a limit it cannot "
         "state: too many inputs, an input over its model's character cap (GET /info: max_input_chars, by "
         "default the model's max length x 8 characters) or max length, an index, token id or dimensions past the "
         "model's sizes (GET /info), a response over a cap (the code names which)",
    429: "Server busy: admission queue full for the caller's class (code overloaded), or the caller's tokens per "
         "minute are spent (code budget_exceeded); retry after Retry-After seconds",
    500: "Inference failed, or an internal error",
    503: "Model not loaded or not ready",
    504: "Request waited past the queue timeout and was not run",
}
INFERENCE_ERRORS = (401, 403, 404, 408, 413, 415, 422, 429, 500, 503, 504)
TOKENIZE_ERRORS = (401, 403, 404, 408, 413, 415, 422, 500, 503)  # not batched: never queued, so no 429 or 504
FINGERPRINT = "The model build that answered: sha256 over its served graph, tokenizer and pooling (GET /info)"
_TIMING = {  # service.middleware's timing headers: what a route that runs a model answers with
    "x-total-time": "Milliseconds the server spent on this request, whole",
    "x-tokenization-time": "Milliseconds spent tokenising this request's inputs, whole",
    "x-queue-time": "Milliseconds the request's inputs waited in the queue (the longest wait), whole",
    "x-inference-time": "Milliseconds of the graph runs that carried this request's inputs, whole",
    "x-cached-inputs": "Inputs (windows, when chunked) answered without a graph run: from the answer cache, or a "
                       "repeat of another input of this request",
}


def errors(*statuses: int, model: type[BaseModel] = ErrorResponse) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries: each status with the one error model (or `model`: /v2's own); for the
    routes that queue for the model (those that may answer 429), the timing headers of their 200 too."""
    documented: dict[int | str, dict[str, Any]] = {
        status: {"model": model, "description": _DESCRIPTIONS[status]} for status in statuses
    }
    if 429 in statuses:
        documented[200] = {"headers": {
            **{name: {"description": text, "schema": {"type": "integer"}} for name, text in _TIMING.items()},
            "x-model-fingerprint": {"description": FINGERPRINT, "schema": {"type": "string"}},
        }}
    return documented


def json_response(content: Any, status_code: int = 200) -> Response:
    """orjson straight from numpy arrays (OPT_SERIALIZE_NUMPY), no intermediate lists."""
    body = orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status_code, media_type="application/json")


def as_list(inputs: object) -> list[Any]:
    """One input (a text, an image item) as a list of one; a list as it is."""
    return inputs if isinstance(inputs, list) else [inputs]


def direction(body: Any) -> Direction:
    """The request's truncation_direction (Left/Right in either case) as the core spells it."""
    return body.truncation_direction.lower()  # type: ignore[no-any-return]


def given(body: BaseModel, field: str) -> Any:
    """The value of `field` when the request gave it, else None: the core resolves the model's default
    (`inference.rules`), which the field's documented default only states for one model."""
    return getattr(body, field) if field in body.model_fields_set else None


def chunking(body: Any, served: ServedModel) -> Chunking | None:
    """The request's chunking (mode and overlap), or None to truncate (`inference.rules.text_chunking`)."""
    bundle = served.bundle
    return rules.text_chunking(bundle.tokenizer, bundle.manifest, body.chunking, given(body, "chunk_overlap"))
