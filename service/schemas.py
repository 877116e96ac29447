"""Request and response models. Requests are validated by pydantic; responses are documented here
and written by orjson straight from numpy (the route returns the bytes, these models feed OpenAPI)."""

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
RAW_SCORES = ("Return the raw logits instead of scores. Scores are softmax probabilities over the labels, or, for "
              "a model with a single label (a cross-encoder's relevance), the sigmoid of its logit.")
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


class EmbeddingWindow(WindowSpan):
    embedding: list[float]


# -- OpenAI ----------------------------------------------------------------------------------------
class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields like `user`

    input: Text | Texts | TokenIds | Annotated[list[TokenIds], Field(min_length=1)] = Field(
        description="A text, a list of texts, a list of token ids, or a list of token-id lists (used as given; "
        "each id below the model's vocabulary size, see GET /info).",
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


# -- text-embeddings-inference ---------------------------------------------------------------------
class Prompted(_Strict):
    prompt_name: Text | None = Field(None, description=PROMPT_NAME)
    instruction: Instruction | None = Field(None, description=INSTRUCTION)


class EmbedRequest(Truncation, Chunked, Prompted):
    inputs: TextInputs
    normalize: StrictBool = Field(True, description="L2-normalise the pooled vectors.")
    dimensions: Positive | None = Field(None, description=DIMENSIONS)


class ClassifyRequest(Truncation, Chunked):
    inputs: TextInputs
    top_k: Positive | None = Field(None, description="Return only the k best labels per input (default: all).")
    raw_scores: StrictBool = Field(False, description=RAW_SCORES)


class LabelScore(BaseModel):
    label: str
    score: float


class ClassificationWindow(WindowSpan):
    scores: list[LabelScore]


One = Annotated[list[Text], Field(min_length=1, max_length=2)]  # TEI's sequence: [text], or a pair [text, text]


class PredictParameters(_Strict):
    """The Hugging Face Inference API's text-classification parameters (what `InferenceClient` sends)."""

    top_k: Positive | None = Field(None, description="Return only the k best labels.")
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = Field(
        None, description="Scores from the logits; when given it overrides raw_scores. Default: softmax over "
        "two or more labels, sigmoid of a single label's logit.",
    )


class PredictRequest(Truncation):
    inputs: Text | One | Annotated[list[One], Field(min_length=1)] = Field(
        description="A text, [text] or a pair [text, text]: answered with one list of labels; or a batch [[text], "
        "[text, text], ...]: one list per input. Pairs go through the tokenizer's pair template (with token "
        "type ids where the model has them).",
    )
    raw_scores: StrictBool = Field(False, description=RAW_SCORES)
    parameters: PredictParameters | None = None


class SimilarityInput(_Strict):
    source_sentence: Text = Field(description="The text the others are compared with.")
    sentences: Texts = Field(description="Texts compared with source_sentence.")


class SimilarityParameters(TruncationFields, Prompted):
    """TEI's similarity parameters: truncation, and the prompt of every sentence (the source's too)."""


class SimilarityRequest(Tasked, _Request):
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class EmbedAllRequest(Truncation, Prompted):
    inputs: TextInputs


class DecodeRequest(_Request):
    ids: TokenIds | Annotated[list[TokenIds], Field(min_length=1)] = Field(
        description="A list of token ids, or a list of them; each id below the model's vocabulary size (GET /info).",
    )
    skip_special_tokens: StrictBool = True


class TokenizeRequest(_Request):
    inputs: TextInputs
    add_special_tokens: StrictBool = True


class Token(BaseModel):
    id: int
    text: str
    start: int = Field(description="Character offset of the token's start in the input.")
    stop: int = Field(description="Character offset just past the token's end.")
    special: bool


# -- attention -------------------------------------------------------------------------------------
class AttentionRequest(Truncation):
    inputs: TextInputs
    layers: Indices | None = Field(None, description="Layer indices to return, each below the model's num_layers "
                                   "(GET /info), each once, in the order given; default: all. Only the maps asked "
                                   "for are computed and counted against the attention graph cap.")
    heads: Indices | None = Field(None, description="Head indices to return, each below the model's num_heads "
                                  "(GET /info), each once, in the order given; default: all.")
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
