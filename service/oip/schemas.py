"""Open Inference Protocol v2 (KServe / Triton REST) request and response models.

The protocol: kserve/open-inference-protocol, specification/protocol/inference_rest.md; the binary tensor
data extension: Triton's docs/protocol/extension_binary_data.md. Requests are validated here (the route
parses the JSON header itself, because with binary data the body is not JSON); responses are written by
`service.v2codec` and documented by these models. Parameter values are JSON scalars, as the protocol
allows; unknown parameters are refused (422) rather than ignored, so a misspelt one is noticed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from service.schemas import INSTRUCTION, TASK, Index, Instruction, integral

Aggregation = Literal["none", "mean", "max", "rollout"]
InputName = Literal["text", "input_ids", "attention_mask"]
OutputName = Literal["embeddings", "logits", "scores", "sparse", "multi_vectors", "multi_vector_mask", "attentions",
                     "attention_mask"]
EXAMPLE: dict[str, Any] = {
    "id": "42", "parameters": {"binary_data_output": False},
    "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a cat", "a dog sat"]}],
    "outputs": [{"name": "embeddings"}, {"name": "scores"}],
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorParameters(_Strict):
    binary_data_size: Index | None = Field(None, description="Bytes of this tensor's data after the JSON header "
                                           "(binary tensor data extension).")


# A tensor element in JSON: a string (BYTES) or an integer (INT64, INT32; 2.0 is JSON Schema's integer 2); which
# one a tensor takes is its datatype's (service.oip.codec). The inputs are of rank 1 or 2, so their data is flat
# or one level nested (a list per row).
Element = StrictStr | Annotated[StrictInt, BeforeValidator(integral)]
# A shape dimension: an integer as JSON Schema counts them (2.0 too), >= 0 as InferInput._non_negative refuses
# the rest with its own message; the schema states the bounds. The codec refuses, naming the input, a shape of
# more than MAX_RANK dimensions (the inputs are [n] or [n, T]) or with one past MAX_DIMENSION: an element count
# checks the dimensions only while none is 0, and numpy cannot reshape to [0, 10**20].
MAX_RANK = 2
MAX_DIMENSION = 2**31 - 1  # INT32's largest
Dimension = Annotated[StrictInt, Field(json_schema_extra={"minimum": 0, "maximum": MAX_DIMENSION}),
                      BeforeValidator(integral)]


# The server reads a tensor's data from the JSON unless its parameters give binary_data_size
# (service.oip.codec.read_inputs), so `data` may be absent or null only then. pydantic cannot say "one of these
# two fields" itself: written into the schema as an anyOf of the two forms, so that clients and schema fuzzers
# meet the rule the server applies (both may hold: the binary data is read).
DATA_OR_BINARY: dict[str, Any] = {"anyOf": [
    {"required": ["data"], "properties": {"data": {"type": "array"}}},
    {"required": ["parameters"], "properties": {"parameters": {
        "type": "object", "required": ["binary_data_size"], "properties": {"binary_data_size": {"type": "integer"}}}}},
]}


class InferInput(_Strict):
    model_config = ConfigDict(json_schema_extra=DATA_OR_BINARY)

    name: InputName = Field(description="`text` (BYTES, shape [n]), or `input_ids` (INT64 or INT32, shape "
                            "[n, T]) with an optional `attention_mask` of the same shape (1 keeps a token).")
    shape: list[Dimension] = Field(description=f"At most {MAX_RANK} dimensions, each 0 to {MAX_DIMENSION}.",
                                   json_schema_extra={"maxItems": MAX_RANK})
    datatype: Literal["BYTES", "INT64", "INT32"]
    parameters: TensorParameters | None = None
    data: list[Element | list[Element]] | None = Field(
        None, description="Row-major elements, flat or a list per row: strings for BYTES, integers for INT64 and "
        "INT32. Required unless `parameters` give binary_data_size (the tensor is sent as binary data).")

    @field_validator("data", mode="wrap")
    @classmethod
    def _elements(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError:  # one line for the union's three branches, each failed
            raise ValueError("elements must be strings (BYTES) or integers (INT64, INT32), flat or a list per "
                             "row") from None

    @field_validator("shape")
    @classmethod
    def _non_negative(cls, shape: list[int]) -> list[int]:
        if any(d < 0 for d in shape):
            raise ValueError("dimensions must be >= 0")
        return shape


class OutputParameters(_Strict):
    binary_data: StrictBool | None = Field(None, description="Return this output as binary data after the JSON "
                                           "header (default: the request's binary_data_output).")


class RequestedOutput(_Strict):
    name: OutputName = Field(description="What GET /v2/models/{name} lists: logits and scores only for a model "
                             "with labels, attentions for a bundle with an attention graph.")
    parameters: OutputParameters | None = None


# Parameter values are scalars in the protocol: an index, or indices as text ("0,2"; ASCII digits only).
IndexParameter = Annotated[StrictInt, Field(ge=0), BeforeValidator(integral)] | \
    Annotated[StrictStr, Field(pattern=r"^[0-9]+(,[0-9]+)*$")]


class InferParameters(_Strict):
    binary_data_output: StrictBool = Field(False, description="Return every output as binary data unless the "
                                           "output says otherwise.")
    truncate: StrictBool | None = Field(None, description="Cut inputs longer than the model's max length; false "
                                        "refuses them (422). Default: the server's ATTNSERVE_TRUNCATE.")
    truncation_direction: Literal["left", "right", "Left", "Right"] = Field(
        "right", description="Which end of a long input is cut.")
    normalize: StrictBool | None = Field(None, description="L2-normalise `embeddings` (default: as the model's "
                                         "manifest says, as /v1/embeddings does).")
    layers: IndexParameter | None = Field(None, description="`attentions`: a layer index or comma-separated "
                                          "indices such as '0,2' (default: all).")
    heads: IndexParameter | None = Field(None, description="`attentions`: a head index or comma-separated indices "
                                         "such as '0,2' (default: all).")
    aggregation: Aggregation = Field("none", description="`attentions`: none [n, l, h, T, T]; mean or max over "
                                     "heads [n, l, T, T]; rollout across the layers [n, T, T].")
    prompt_name: StrictStr | None = Field(None, description="One of the model's prompts (GET /info), put before "
                                          "every `text` input as /embed puts it, so `embeddings` equal /embed's; "
                                          "`attentions` and `attention_mask` cover its tokens too. Default: the "
                                          "model's default prompt, when it names one.")
    instruction: Instruction | None = Field(None, description=INSTRUCTION)
    task: StrictStr | None = Field(None, description=TASK)
    input_type: Literal["query", "document"] = Field("document", description=(
        "A multi-vector model's `multi_vectors`: its query or its document treatment, as /v1/multi-vector's "
        "input_type."))


class InferRequest(BaseModel):
    # extra: the binary extension's own example sends model_name
    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [EXAMPLE]})

    id: StrictStr | None = Field(None, description="Returned in the response.")
    parameters: InferParameters = Field(default_factory=lambda: InferParameters.model_validate({}))
    inputs: list[InferInput] = Field(min_length=1)
    outputs: list[RequestedOutput] | None = Field(None, description="Default: embeddings, and logits and scores "
                                                  "when the model has labels (attentions only when asked for).")


def index_list(value: int | str | None) -> list[int] | None:
    """The `layers` / `heads` parameter as indices."""
    if value is None:
        return None
    return [value] if isinstance(value, int) else [int(p) for p in value.split(",")]


# -- responses ------------------------------------------------------------------------------------
class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


class MetadataTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int] = Field(description="-1 marks a dimension whose size varies.")


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[MetadataTensor]
    outputs: list[MetadataTensor]


class OutputTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, int] | None = Field(None, description="binary_data_size when sent as binary data.")
    data: list[float] | None = Field(None, description="Row-major, flat; absent when sent as binary data.")


class InferResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[OutputTensor]


class ProtocolError(BaseModel):
    error: str


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema with its `$defs` written in place, for an OpenAPI requestBody that FastAPI
    does not generate itself (the route reads the body: it may carry binary data after the JSON)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        return [resolve(item) for item in node] if isinstance(node, list) else node

    return resolve(schema)  # type: ignore[no-any-return]
