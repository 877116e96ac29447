"""The request and response models of OpenAI's embeddings API: POST /v1/embeddings and GET /v1/models. Requests
are validated by pydantic; responses are documented here and written by orjson straight from numpy (the route
returns the bytes, these models feed OpenAPI)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.chunking import DEFAULT_OVERLAP
from service.images import ImageItem
from service.schemas import (
    CHUNK_OVERLAP,
    CHUNKING,
    DIMENSIONS,
    INSTRUCTION,
    PROMPT_NAME,
    TASK,
    Index,
    Instruction,
    Positive,
    Text,
    Texts,
    TokenIds,
    WindowSpan,
)

# prompt_name and input_type each choose the prompt: the server refuses both at once (422 prompt_conflict)
ONE_PROMPT_CHOICE: dict[str, Any] = {"not": {"required": ["prompt_name", "input_type"], "properties": {
    "prompt_name": {"type": "string"}, "input_type": {"type": "string"}}}}


class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", json_schema_extra=ONE_PROMPT_CHOICE)  # clients send fields like `user`

    input: Text | Texts | TokenIds | Annotated[list[TokenIds], Field(min_length=1)] | Annotated[
        list[ImageItem | Text], Field(min_length=1)] = Field(
        description="A text, a list of texts, a list of token ids, or a list of token-id lists (used as given; "
        "each id below the model's vocabulary size, see GET /info). An image model (GET /info: `modality` image) "
        "is sent images instead: data URIs (data:image/png;base64,...) as strings, or items {\"image\": data URI "
        "or base64}; a request of images holds images only, and chunking, prompts, instructions and tasks do not "
        "apply to them. URLs are refused.",
    )
    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them); default: "
                               "the first. With one model served, any name is accepted.")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32 bytes.")
    dimensions: Positive | None = Field(None, description=DIMENSIONS)
    chunking: Literal["mean", "windows"] | None = Field(
        None, description=CHUNKING + " With windows, `data` lists every window of every input in order."
    )
    chunk_overlap: Index = Field(DEFAULT_OVERLAP, description=CHUNK_OVERLAP)
    input_type: Literal["query", "document"] | None = Field(None, description=(
        "What the inputs are, as Cohere's and vLLM's APIs say it: query puts the model's prompt named `query` "
        "before every text input, document its prompt named `document` (else `passage`); a model without such a "
        "prompt embeds the text as given (many prompt only their queries). Default: the model's "
        "`default_prompt_name`, when it names one. `usage` counts the prompt's tokens. Token-id inputs are run as "
        "given."))
    prompt_name: Text | None = Field(None, description=PROMPT_NAME)
    instruction: Instruction | None = Field(None, description=INSTRUCTION)
    task: Text | None = Field(None, description=TASK)
    modality: Literal["text", "image"] | None = Field(None, description=(
        "Infinity's: image reads every input as an image (a data URI, bare base64 or an {\"image\": ...} item), "
        "text every one as a text (a data URI too). Default: by the inputs' shape (data URIs and image items are "
        "images, for a model that reads images)."))


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class OpenAIWindowEmbedding(OpenAIEmbedding, WindowSpan):
    """With chunking=windows: `index` is the position in `data`, `input_index` the input the window is from."""

    input_index: int


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding | OpenAIWindowEmbedding]
    model: str
    usage: Usage


class OpenAIModel(BaseModel):
    id: str = Field(description="The served name; send it as `model`.")
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    tasks: list[str] = Field(description="What the model can be asked: embed, classify, rerank, sparse, tokens, "
                             "attention, embed_all (a request for another gets 422 naming these).")
    fingerprint: str = Field(description="The model build: sha256 over its served graph, tokenizer and pooling "
                             "(every answer of it carries it as x-model-fingerprint).")
    prompts: dict[str, str] = Field(description="The model's prompts by name (what `input_type` chooses from).")
    default_prompt_name: str | None = Field(description="The prompt texts get when the request names none.")
    instruction: dict[str, str] | None = Field(description=(
        "An instruction-following embedder's format (`template`, with {instruction}) and its own task (`default`), "
        "from its instruction prompt; null for a model that takes no `instruction`."))
    adapters: list[str] = Field(description=(
        "The model's LoRA adapters, by name: what a request's `task` (or a model name `id:task`, listed as a "
        "model of its own) may name; empty for a model without adapters."))
    adapter: str | None = Field(None, description="The adapter a `name:adapter` entry runs; null for the model "
                                "itself.")


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]
