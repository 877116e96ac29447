"""Domain errors of the service, one status table, one JSON error body.

The engine, batcher and runner raise these; `service.app` turns any exception into
`{"error": {"message", "type", "code"}}` through `error_body_for` and nothing else. The one exception is
the Open Inference Protocol's routes (/v2...), whose clients read that protocol's `{"error": message}`
(same statuses, same message).

    ServiceError                 500 server_error            (base; never raised bare)
    ├── InvalidRequest           422 invalid_request_error   bad or unusable input
    │   ├── InputTooLong         422   an input exceeds max characters or max tokens (truncate=false)
    │   ├── TooManyInputs        422   more inputs than ATTNSERVE_MAX_INPUTS
    │   ├── AttentionTooLarge    422   the /attention response would exceed ATTNSERVE_ATTENTION_CAP_BYTES
    │   ├── ResponseTooLarge     422   the /embed_all response would exceed ATTNSERVE_EMBED_ALL_CAP_BYTES
    │   ├── OutOfRange           422   a value past a size of the loaded model (layer, head, token id, dimensions)
    │   └── Unsupported          422   the bundle cannot do it (no labels, no attention graph)
    ├── Unauthorized             401 authentication_error    missing or wrong bearer key
    ├── NotFound                 404 not_found_error         (from routing)
    │   └── ModelNotFound        404   no served model has the requested name (the message lists them)
    ├── MethodNotAllowed         405 invalid_request_error   (from routing)
    ├── RequestTimeout           408 invalid_request_error   head or body not received within its deadline
    ├── PayloadTooLarge          413 invalid_request_error   body over ATTNSERVE_PAYLOAD_LIMIT_BYTES
    ├── UnsupportedMediaType     415 invalid_request_error   body is not application/json
    ├── Overloaded               429 rate_limit_error        admission full; carries Retry-After
    ├── NotReady                 503 unavailable_error       not warm, or the last inference failed
    ├── QueueTimeout             504 timeout_error           waited past ATTNSERVE_QUEUE_TIMEOUT_S; not run
    ├── InferenceFailed          500 server_error            a batch failed; every request in it gets this
    │   └── NonFiniteOutput      500   the graph returned NaN or Inf for an input; never sent as numbers
    └── ClientGone               499 client_closed_request   the client disconnected; its work was dropped

Any other exception is a bug: it is logged with its traceback and answered with a generic 500 that
names nothing internal.
"""

from __future__ import annotations

from typing import ClassVar

import orjson


class ServiceError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(ServiceError):
    status, type, code = 422, "invalid_request_error", "invalid_request"


class InputTooLong(InvalidRequest):
    code = "input_too_long"


class TooManyInputs(InvalidRequest):
    code = "too_many_inputs"


class AttentionTooLarge(InvalidRequest):
    code = "attention_too_large"


class ResponseTooLarge(InvalidRequest):
    code = "response_too_large"


class OutOfRange(InvalidRequest):
    """Valid for the OpenAPI document, which cannot know the bundle, but past a size of the loaded model."""

    code = "out_of_range"


class Unsupported(InvalidRequest):
    code = "unsupported"


class Unauthorized(ServiceError):
    status, type, code = 401, "authentication_error", "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class NotFound(ServiceError):
    status, type, code = 404, "not_found_error", "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class MethodNotAllowed(ServiceError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class RequestTimeout(ServiceError):
    status, type, code = 408, "invalid_request_error", "request_timeout"


class PayloadTooLarge(ServiceError):
    status, type, code = 413, "invalid_request_error", "payload_too_large"


class UnsupportedMediaType(ServiceError):
    status, type, code = 415, "invalid_request_error", "unsupported_media_type"


class Overloaded(ServiceError):
    status, type, code = 429, "rate_limit_error", "overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class NotReady(ServiceError):
    status, type, code = 503, "unavailable_error", "not_ready"


class QueueTimeout(ServiceError):
    status, type, code = 504, "timeout_error", "queue_timeout"


class InferenceFailed(ServiceError):
    status, type, code = 500, "server_error", "inference_failed"


class NonFiniteOutput(InferenceFailed):
    code = "non_finite_output"


class ClientGone(ServiceError):
    status, type, code = 499, "client_closed_request", "client_gone"


GENERIC_500 = "internal server error"
V2_PREFIX = "/v2"  # the Open Inference Protocol's routes
_BY_STATUS: dict[int, type[ServiceError]] = {
    401: Unauthorized, 404: NotFound, 405: MethodNotAllowed, 408: RequestTimeout, 413: PayloadTooLarge,
    415: UnsupportedMediaType, 429: Overloaded, 503: NotReady, 504: QueueTimeout,
}


def for_status(status: int, message: str) -> ServiceError:
    """A domain error for a status produced outside the engine (routing, framework)."""
    if status == 400:  # the framework could not parse the body (e.g. not UTF-8): the same 422 as malformed JSON
        return InvalidRequest("the request body is not valid JSON", code="validation_error")
    cls = _BY_STATUS.get(status)
    if cls is None:
        error = InvalidRequest(message) if 400 <= status < 500 else ServiceError(GENERIC_500)
        error.status = status  # type: ignore[misc]
        return error
    return cls(message)


def error_body(error: ServiceError) -> bytes:
    """The one JSON error shape."""
    return orjson.dumps({"error": {"message": error.message, "type": error.type, "code": error.code}})


def error_body_for(path: str, error: ServiceError) -> bytes:
    """The body for an error on `path`: the Open Inference Protocol's `{"error": message}` on its routes
    (/v2 and below), the one JSON error shape everywhere else."""
    if path == V2_PREFIX or path.startswith(V2_PREFIX + "/"):
        return orjson.dumps({"error": error.message})
    return error_body(error)
