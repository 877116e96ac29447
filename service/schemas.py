"""Request and response models. Requests are validated by pydantic; responses are documented here
and written by orjson straight from numpy (the route returns the bytes, these models feed OpenAPI)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_unicode(text: str) -> str:
    """JSON may carry a lone surrogate escape ("\\ud800"); it is not a character, so refuse it (422)
    rather than fail later in the tokenizer or the JSON writer."""
    if _SURROGATE.search(text):
        raise ValueError("contains a lone UTF-16 surrogate, which is not valid Unicode")
    return text


Text = Annotated[str, AfterValidator(_valid_unicode)]
TextInputs = Text | list[Text]
Direction = Literal["Left", "Right", "left", "right"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them); default: "
                               "the first. With one model served, any name is accepted. Or the `model` query.")


class Truncation(_Request):
    truncate: bool | None = Field(None, description="Cut inputs longer than the model's max length; "
                                  "false refuses them (422). Default: the server's ATTNSERVE_TRUNCATE.")
    truncation_direction: Direction = Field("Right", description="Which end of a long input is cut.")


# -- OpenAI ----------------------------------------------------------------------------------------
class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields like `user`

    input: Text | list[Text] | list[int] | list[list[int]] = Field(
        description="A text, a list of texts, a list of token ids, or a list of token-id lists (used as given).",
    )
    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them); default: "
                               "the first. With one model served, any name is accepted.")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32 bytes.")
    dimensions: int | None = Field(None, ge=1, description="Keep the first `dimensions` values, then renormalise.")


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: Usage


class OpenAIModel(BaseModel):
    id: str = Field(description="The served name; send it as `model`.")
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]


# -- text-embeddings-inference ---------------------------------------------------------------------
class EmbedRequest(Truncation):
    inputs: TextInputs
    normalize: bool = Field(True, description="L2-normalise the pooled vectors.")
    dimensions: int | None = Field(None, ge=1, description="Keep the first `dimensions` values, then renormalise.")


class ClassifyRequest(Truncation):
    inputs: TextInputs
    top_k: int | None = Field(None, ge=1, description="Return only the k best labels per input (default: all).")
    raw_scores: bool = Field(False, description="Return the raw logits instead of softmax probabilities.")


class LabelScore(BaseModel):
    label: str
    score: float


class TokenizeRequest(_Request):
    inputs: TextInputs
    add_special_tokens: bool = True


class Token(BaseModel):
    id: int
    text: str
    start: int = Field(description="Character offset of the token's start in the input.")
    stop: int = Field(description="Character offset just past the token's end.")
    special: bool


# -- attention -------------------------------------------------------------------------------------
class AttentionRequest(Truncation):
    inputs: TextInputs
    layers: list[int] | None = Field(None, description="Layer indices to return (default: all).")
    heads: list[int] | None = Field(None, description="Head indices to return (default: all).")
    aggregation: Literal["none", "mean", "max", "rollout"] = Field(
        "none", description="none: (layers, heads, n, n); mean or max over heads: (layers, n, n); "
        "rollout (Abnar & Zuidema) across the chosen layers: (n, n).",
    )
    encoding: Literal["float", "base64"] = Field("float", description="Nested float lists, or base64 bytes.")
    dtype: Literal["float16", "float32"] = Field("float32", description="Little-endian dtype of base64 data.")


class AttentionItem(BaseModel):
    tokens: list[Token]
    shape: list[int]
    attention: list | str = Field(description="Nested lists of floats, or base64 of `dtype` values in C order.")


class AttentionResponse(BaseModel):
    model: str
    aggregation: str
    encoding: str
    dtype: str
    data: list[AttentionItem]


# -- operations ------------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Status(BaseModel):
    status: str
