"""What every protocol's models are built from: the JSON field types (as JSON Schema defines them), the
descriptions of the fields several routes share, the base request bodies (a `model`, a `task`, truncation,
chunking), a window's span, the one error body every route documents and /health's and /ready's status.
Requests are validated by pydantic; responses are documented by these models and written by orjson straight from
numpy. Each protocol's own models have a module of their own: openai_schemas.py, tei_schemas.py,
attention_schemas.py, head_schemas.py (rerank, sparse, token labels, token vectors) and oip/schemas.py."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
)

from inference.chunking import DEFAULT_OVERLAP

_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_unicode(text: str) -> str:
    """JSON may carry a lone surrogate escape ("\\ud800"); it is not a character, so refuse it (422)
    rather than fail later in the tokenizer or the JSON writer."""
    if _SURROGATE.search(text):
        raise ValueError("contains a lone UTF-16 surrogate, which is not valid Unicode")
    return text


def _distinct(indices: list[int]) -> list[int]:
    """Layers and heads are chosen once each: a repeated index would make the attention graph compute and hold its
    map again (and the document says uniqueItems)."""
    if len(set(indices)) != len(indices):
        raise ValueError("must not repeat an index")
    return indices


def integral(value: object) -> object:
    """JSON Schema's `integer` is any number with a zero fractional part, so 2.0 is the integer 2 (the
    document cannot say otherwise); 2.5, true and "2" stay what they are and fail the strict check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# JSON types are taken as JSON Schema defines them, so that the document and the server agree: a boolean
# is not an integer (`[[false]]` is no token-id list), a number or a string is not a boolean
# (`"normalize": 0`), and a list the server needs an item in says `minItems: 1` instead of failing later.
Text = Annotated[str, AfterValidator(_valid_unicode)]
Texts = Annotated[list[Text], Field(min_length=1)]
TextInputs = Text | Texts
Index = Annotated[StrictInt, Field(ge=0), BeforeValidator(integral)]  # bounds first: they stay in the schema
Positive = Annotated[StrictInt, Field(ge=1), BeforeValidator(integral)]
TokenIds = Annotated[list[Index], Field(min_length=1)]
Indices = Annotated[list[Index], Field(min_length=1, json_schema_extra={"uniqueItems": True}),
                    AfterValidator(_distinct)]
Direction = Literal["Left", "Right", "left", "right"]
DIMENSIONS = "Keep the first `dimensions` values (at most the model's embedding_size, see GET /info), then renormalise."
CHUNKING = (
    "Instead of truncating, cut each input into windows of the model's max length less its special tokens "
    "(GET /info), each sharing `chunk_overlap` tokens with the next and run as one input. mean: one answer per input, "
    "the mean of its windows' pooled vectors (or logits) weighted by their content tokens, taken before "
    "normalisation (or softmax); windows: every window's answer with its span in the input. Default: truncate."
)
PROMPT_NAME = (
    "One of the model's prompts (GET /info and /v1/models list each model's `prompts`), put before every text "
    "input as sentence-transformers' encode(prompt_name=...) puts it; the model reads, and usage counts, its tokens "
    "too. A name the model does not have is refused (422, listing its prompts). Default: the model's "
    "`default_prompt_name`, when it names one. Token-id inputs are run as given."
)
INSTRUCTION = (
    "The task of an instruction-following embedder (Qwen3-Embedding, e5-mistral, gte-Qwen2; GET /info and "
    "/v1/models give each model's `instruction`: its template and default task, or null for a model that takes "
    "none): every text input is read as `Instruct: {instruction}\\nQuery:{text}`, in the spacing of the model's own "
    "instruction prompt, as sentence-transformers' encode(texts, prompt=...) reads it; usage counts its tokens. "
    "For queries: alone or with input_type query; refused (422, instruction_not_taken) with prompt_name, input_type "
    "document or chunking, and by a model without an instruction prompt. 1 to 2,000 characters."
)
TASK = (
    "The model's LoRA adapter to run, by name: its tasks, as Jina's API calls them (jina-embeddings-v3's "
    "retrieval.query, retrieval.passage, separation, classification, text-matching; GET /info and /v1/models list "
    "each model's `adapters`). Every graph run of the request carries it; a model name `base:task` says the same, "
    "and a different task beside it is refused (422, task_conflict). When the model has a prompt named like the "
    "task and the request names no prompt_name, input_type or instruction, that prompt is put before every text "
    "input, as jina's encode(task=t, prompt_name=t) does. A task the model does not have is refused (422, "
    "unknown_task, listing its tasks), and so is any task on a model without adapters (422, no_tasks). "
    "Default: the base model, no adapter."
)
Instruction = Annotated[str, StringConstraints(min_length=1, max_length=2000), AfterValidator(_valid_unicode)]
CHUNK_OVERLAP = ("Tokens shared by neighbouring windows when chunking; below the window size (the model's max "
                 "length less its special tokens), else 422. Default: 32, or half the window when 32 does "
                 "not fit in it.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Request(_Strict):
    """A route's request body: it may name the served model."""

    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them); default: "
                               "the first. With one model served, any name is accepted. Or the `model` query.")


class Tasked(_Strict):
    """A request that runs the model: it may name the model's adapter (task)."""

    task: Text | None = Field(None, description=TASK)


class TruncationFields(_Strict):
    truncate: StrictBool | None = Field(None, description="Cut inputs longer than the model's max length; "
                                        "false refuses them (422). Default: the server's ATTNSERVE_TRUNCATE.")
    truncation_direction: Direction = Field("Right", description="Which end of a long input is cut.")


class Truncation(TruncationFields, Tasked, _Request):
    """Truncation fields on a route's request body (one that runs the model: it may name a task)."""


class Chunked(_Request):
    chunking: Literal["mean", "windows"] | None = Field(None, description=CHUNKING)
    chunk_overlap: Index = Field(DEFAULT_OVERLAP, description=CHUNK_OVERLAP)


class WindowSpan(BaseModel):
    start: int = Field(description="Offset of the window's first content character in the input (for token-id "
                       "inputs: the position of its first token).")
    stop: int = Field(description="Offset just past the window's last content character (or token).")
    tokens: int = Field(description="Content tokens in the window (special tokens excluded): its weight in the mean.")


# -- operations ------------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Status(BaseModel):
    status: str
