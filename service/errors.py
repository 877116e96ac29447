"""The HTTP side of errors: the errors the edge raises itself, one status table for every error, and one
JSON error body.

The core raises the domain errors of `inference.errors`; the edge adds its own below. `service.app` turns
any of them into `{"error": {"message", "type", "code"}}` with the status of this table, and nothing else
does. The one exception is the Open Inference Protocol's routes (/v2..., but Cohere's /v2/rerank and /v2/embed),
whose clients read that protocol's `{"error": message}` (same statuses, same message).

    status  type                     error (inference.errors unless marked edge)
    422     invalid_request_error    InvalidRequest and its kinds: InputTooLong, TooManyInputs,
                                     AttentionTooLarge, ResponseTooLarge, OutOfRange, Unsupported,
                                     UnknownPrompt, UnknownAdapter, NoInstruction, InvalidImage
    401     authentication_error     Unauthorized (edge): missing or wrong bearer key
    403     permission_error         Forbidden (edge): the caller's key may not use this model
    404     not_found_error          NotFound (edge, from routing), ModelNotFound
    405     invalid_request_error    MethodNotAllowed (edge, from routing)
    408     invalid_request_error    RequestTimeout (edge): head or body not received within its deadline
    413     invalid_request_error    PayloadTooLarge (edge): body over ATTNSERVE_PAYLOAD_LIMIT_BYTES
    415     invalid_request_error    UnsupportedMediaType (edge): body is not application/json
    429     rate_limit_error         Overloaded: admission full (for the caller's class); carries Retry-After
                                     OverBudget (edge): the caller's tokens per minute are spent; Retry-After
                                     says when its budget is above 0 again
    499     client_closed_request    ClientGone (edge): the client disconnected; its work was dropped
    503     unavailable_error        NotReady: not warm, the last inference failed, or shutting down
    504     timeout_error            QueueTimeout: waited past ATTNSERVE_QUEUE_TIMEOUT_S; not run
    500     server_error             InferenceFailed (and NonFiniteOutput), any other InferenceError

Any other exception is a bug: it is logged with its traceback and answered with a generic 500 that
names nothing internal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from inference.errors import (
    InferenceError,
    InvalidRequest,
    ModelNotFound,
    NotReady,
    Overloaded,
    QueueTimeout,
)


class Unauthorized(InferenceError):
    code = "invalid_api_key"


class Forbidden(InferenceError):
    code = "model_not_allowed"


class OverBudget(Overloaded):
    code = "budget_exceeded"


class NotFound(InferenceError):
    code = "not_found"


class MethodNotAllowed(InferenceError):
    code = "method_not_allowed"


class RequestTimeout(InferenceError):
    code = "request_timeout"


class PayloadTooLarge(InferenceError):
    code = "payload_too_large"


class UnsupportedMediaType(InferenceError):
    code = "unsupported_media_type"


class ClientGone(InferenceError):
    code = "client_gone"


GENERIC_500 = "internal server error"
V2_PREFIX = "/v2"  # the Open Inference Protocol's routes (but Cohere's /v2/rerank and /v2/embed, below)
NOT_V2 = frozenset({"/v2/rerank", "/v2/embed"})  # under /v2 but not the protocol's: the one error shape
STATUS: dict[type[InferenceError], tuple[int, str]] = {  # the most specific class in an error's MRO wins
    InvalidRequest: (422, "invalid_request_error"),
    Unauthorized: (401, "authentication_error"),
    Forbidden: (403, "permission_error"),
    NotFound: (404, "not_found_error"),
    ModelNotFound: (404, "not_found_error"),
    MethodNotAllowed: (405, "invalid_request_error"),
    RequestTimeout: (408, "invalid_request_error"),
    PayloadTooLarge: (413, "invalid_request_error"),
    UnsupportedMediaType: (415, "invalid_request_error"),
    Overloaded: (429, "rate_limit_error"),
    ClientGone: (499, "client_closed_request"),
    NotReady: (503, "unavailable_error"),
    QueueTimeout: (504, "timeout_error"),
    InferenceError: (500, "server_error"),
}
_BY_STATUS = {status: cls for cls, (status, _) in STATUS.items() if cls.__module__ == __name__} | {
    429: Overloaded, 503: NotReady, 504: QueueTimeout,
}


def status_of(error: InferenceError) -> tuple[int, str]:
    """(HTTP status, error type) of `error`."""
    if isinstance(error, _Other):
        return error.status, "invalid_request_error"
    return next(STATUS[cls] for cls in type(error).__mro__ if cls in STATUS)


def headers_of(error: InferenceError) -> dict[str, str]:
    if isinstance(error, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(error, Overloaded):
        return {"Retry-After": str(error.retry_after_s)}
    return {}


class _Other(InferenceError):
    """A status from the framework that the table does not name: kept as it is."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def for_status(status: int, message: str) -> InferenceError:
    """A domain error for a status produced outside the core (routing, framework)."""
    if status == 400:  # the framework could not parse the body (e.g. not UTF-8): the same 422 as malformed JSON
        return InvalidRequest("the request body is not valid JSON", code="validation_error")
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls(message)
    if 400 <= status < 500:
        return _Other(message, status)
    return InferenceError(GENERIC_500)


def describe_validation(errors: Sequence[Mapping[str, Any]], most: int = 5) -> str:
    """The first few of pydantic's (or FastAPI's) validation errors as `where: why; ...` (where: the field's
    path in the body, or "body")."""
    parts = []
    for err in errors[:most]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def error_body(error: InferenceError) -> bytes:
    """The one JSON error shape."""
    return orjson.dumps({"error": {"message": error.message, "type": status_of(error)[1], "code": error.code}})


def error_body_for(path: str, error: InferenceError) -> bytes:
    """The body for an error on `path`: the Open Inference Protocol's `{"error": message}` on its routes
    (/v2 and below), the one JSON error shape everywhere else."""
    if (path == V2_PREFIX or path.startswith(V2_PREFIX + "/")) and path not in NOT_V2:
        return orjson.dumps({"error": error.message})
    return error_body(error)
