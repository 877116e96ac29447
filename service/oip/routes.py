"""Open Inference Protocol v2 (KServe / Triton REST): server metadata and health, model metadata and
readiness, inference, each model path also under /versions/{version}. Errors here carry the protocol's
body `{"error": message}` with this service's statuses (422 for a bad request, as on every route)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from inference.served import ServedModel
from service.dependencies import JobDep, ModelsDep, PickDep
from service.oip import adapter, codec
from service.oip.schemas import (
    InferRequest,
    InferResponse,
    ModelMetadata,
    ModelReady,
    ProtocolError,
    ServerLive,
    ServerMetadata,
    ServerReady,
    inline_schema,
)
from service.routes.common import errors, json_response

router = APIRouter(tags=["open-inference-protocol"])

HEADER_LENGTH = "inference-header-content-length"  # the binary extension's header: read in _infer, not a parameter
# The JSON request. A binary request (the JSON header, then the inputs' data) is described in the operation's
# text: a body whose validity depends on a header's value cannot be stated as a schema.
INFER_BODY = {"requestBody": {"required": True,
                              "content": {"application/json": {"schema": inline_schema(InferRequest)}}}}
INFER_RESPONSES = errors(401, 403, 404, 413, 415, 422, 429, 500, 503, 504, model=ProtocolError)
INFER_RESPONSES[200] |= {  # besides the timing headers errors() documents on routes that queue
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    "description": "JSON; or, with binary outputs, the JSON header (Inference-Header-Content-Length bytes) and then "
    "the outputs' little-endian data",
}
MODEL_ERRORS = errors(401, 403, 404, 422, 503, model=ProtocolError)  # 422: FastAPI would document its own body


@router.get("/v2", response_model=ServerMetadata, responses=errors(401, model=ProtocolError))
async def server_metadata() -> Response:
    """Server name, version and protocol extensions (binary_tensor_data)."""
    return json_response(adapter.server_metadata())


@router.get("/v2/health/live", response_model=ServerLive)
async def server_live() -> Response:
    """200 while the process runs (no key needed)."""
    return json_response({"live": True})


@router.get("/v2/health/ready", response_model=ServerReady, responses=errors(503, model=ProtocolError))
async def server_ready(models: ModelsDep) -> Response:
    """200 when every model is ready, as GET /ready (no key needed)."""
    await models.check_ready()
    return json_response({"ready": True})


@router.get("/v2/models/{name}", response_model=ModelMetadata, responses=MODEL_ERRORS)
async def model_metadata(name: str, pick: PickDep) -> Response:
    """The model's inputs and outputs with names, datatypes and shapes (-1: varies)."""
    return json_response(adapter.model_metadata(pick(name)))


@router.get("/v2/models/{name}/versions/{version}", response_model=ModelMetadata, responses=MODEL_ERRORS)
async def model_version_metadata(name: str, version: str, pick: PickDep) -> Response:
    """As GET /v2/models/{name}; the version must be the served bundle's."""
    return json_response(adapter.model_metadata(_versioned(pick(name), version)))


@router.get("/v2/models/{name}/ready", response_model=ModelReady, responses=MODEL_ERRORS)
async def model_ready(name: str, pick: PickDep) -> Response:
    """200 when this model is warm and its inference works; 503 otherwise."""
    return await _ready(pick(name))


@router.get("/v2/models/{name}/versions/{version}/ready", response_model=ModelReady, responses=MODEL_ERRORS)
async def model_version_ready(name: str, version: str, pick: PickDep) -> Response:
    """As GET /v2/models/{name}/ready; the version must be the served bundle's."""
    return await _ready(_versioned(pick(name), version))


@router.post("/v2/models/{name}/infer", response_model=InferResponse, responses=INFER_RESPONSES,
             openapi_extra=INFER_BODY)
async def infer(name: str, request: Request, pick: PickDep, job: JobDep) -> Response:
    """Inputs `text` (BYTES [n]) or `input_ids` (+ `attention_mask`); outputs `embeddings`, `logits`,
    `scores`, `attentions`, `attention_mask`, each as JSON or binary data. Request parameters: truncate,
    truncation_direction, normalize, layers, heads, aggregation, binary_data_output. With binary tensor data,
    the body is the JSON header and then the inputs' data, and the header Inference-Header-Content-Length
    gives the JSON header's bytes (within the body, else 422; not a documented parameter, since its only
    valid value depends on the body)."""
    return await _infer(pick(name), None, request, job)


@router.post("/v2/models/{name}/versions/{version}/infer", response_model=InferResponse,
             responses=INFER_RESPONSES, openapi_extra=INFER_BODY)
async def infer_version(name: str, version: str, request: Request, pick: PickDep, job: JobDep) -> Response:
    """As POST /v2/models/{name}/infer; the version must be the served bundle's."""
    return await _infer(_versioned(pick(name), version), version, request, job)


def _versioned(served: ServedModel, version: str) -> ServedModel:
    adapter.check_version(served, version)
    return served


async def _ready(served: ServedModel) -> Response:
    await served.ensure_ready()
    return json_response({"name": served.name, "ready": True})


async def _infer(served: ServedModel, version: str | None, request: Request, job: JobDep) -> Response:
    length = codec.header_length(request.headers.get(HEADER_LENGTH))
    parsed, tail = codec.parse_request(await request.body(), length, request.headers.get("content-encoding"))
    outputs = await job(adapter.infer(served, parsed, codec.read_inputs(parsed, tail)))
    header = {"model_name": served.name, "model_version": version or served.bundle.manifest.version}
    if parsed.id is not None:
        header["id"] = parsed.id
    content, json_length = codec.write_response(header, outputs)
    if json_length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(json_length)})
