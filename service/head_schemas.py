"""Request and response models of the routes for the other heads of a retrieval stack: rerank and pair scores
(TEI's /rerank, Cohere's and Jina's /v1/rerank and /v2/rerank, vLLM's /score), sparse vectors (TEI's
/embed_sparse), token labels (/classify_tokens) and token vectors for late interaction (Jina's
/v1/multi-vector). Each request is its ecosystem's own shape; attnserve's additions (`chunking`,
`chunk_overlap`, `explain`, `model`) are optional fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from inference.chunking import DEFAULT_OVERLAP
from service.schemas import (
    CHUNK_OVERLAP,
    TASK,
    Index,
    Positive,
    Tasked,
    Text,
    Texts,
    Truncation,
    TruncationFields,
    WindowSpan,
    _Request,
)

PAIR_CHUNKING = (
    "max: instead of truncating, cut each long document into windows, each scored after the query (the query "
    "repeated in every window); the document gets its best window's score, and `window` says where it is in "
    "the document. Default: truncate."
)
EXPLAIN = (
    "Return, per result, `explanation`: the document's tokens, each with its share of the attention flowing "
    "from the classification position (attention rollout over every layer), with character offsets into the "
    "document (of its best window when chunking). Needs a bundle with an attention graph. A multi-vector "
    "(late-interaction) model explains its MaxSim score instead: per query token, its span in the query, its best "
    "document token's span and their similarity (the score sums or averages those, as the model reduces)."
)


class RerankOptions(BaseModel):
    """attnserve's options on every rerank route."""

    chunking: Literal["max"] | None = Field(None, description=PAIR_CHUNKING)
    chunk_overlap: Index = Field(DEFAULT_OVERLAP, description=(
        "Tokens shared by neighbouring windows of a document when chunking; below the document tokens a pair's "
        "window holds after the longest query it takes (half of the max length less the pair's special tokens), "
        "else 422, whether or not the request chunks. Default: 32, or half that window when 32 does not fit in it."))
    explain: StrictBool = Field(False, description=EXPLAIN)


class Highlight(BaseModel):
    start: int = Field(description="Character offset of the token in the document.")
    stop: int = Field(description="Offset just past the token.")
    weight: float = Field(description="The token's share of the attention flowing from the classification position.")


class MaxSimMatch(BaseModel):
    query_start: int = Field(description="Character offset of the query token in the query.")
    query_stop: int = Field(description="Offset just past the query token.")
    start: int = Field(description="Character offset of its best document token in the document.")
    stop: int = Field(description="Offset just past that document token.")
    similarity: float = Field(description="The two token vectors' cosine: this query token's term of the score.")


class RankExtras(BaseModel):
    window: WindowSpan | None = Field(None, description="With chunking=max: the best window's span in the document.")
    explanation: list[Highlight] | list[MaxSimMatch] | None = Field(None, description=(
        "With explain=true: the document's tokens (a cross-encoder), or each query token's best match (MaxSim)."))


# -- text-embeddings-inference ---------------------------------------------------------------------
class RerankRequest(Truncation, RerankOptions):
    query: Text = Field(description="The query every text is scored against.")
    texts: Texts = Field(description="The texts (documents) to score.")
    raw_scores: StrictBool = Field(False, description="Return the logit instead of its sigmoid.")
    return_text: StrictBool = Field(False, description="Return each text with its score.")


class Rank(RankExtras):
    index: int
    score: float
    text: str | None = None


class EmbedSparseRequest(Truncation):
    inputs: Text | Texts
    top_k: Positive | None = Field(None, description="Keep only the k largest weights of each vector.")


class SparseValue(BaseModel):
    index: int = Field(description="A vocabulary id (GET /tokenize shows a text's ids).")
    value: float = Field(description=(
        "Its weight: the max over the input's tokens of log(1 + relu(logit)) (SPLADE), or of the token weights of "
        "that id (a multi-vector model's lexical weights, bge-m3's sparse output; special tokens dropped)."))


# -- multi-vector (late interaction) ---------------------------------------------------------------
class MultiVectorRequest(Truncation):
    """Jina's POST /v1/multi-vector (jina-colbert's API), for a multi-vector model."""

    input: Text | Texts = Field(description="A text or texts.")
    input_type: Literal["query", "document"] = Field("document", description=(
        "query or document: the model's query or document treatment (ColBERT: its [Q] / [D] marker, a query "
        "expanded to its query length, a document's punctuation vectors dropped). Default: document."))
    dimensions: Positive | None = Field(None, description=(
        "Keep the first n dimensions of every token vector, then renormalise it (at most the model's width)."))
    embedding_type: Literal["float", "base64"] = Field("float", description=(
        "float: each token vector a list of numbers; base64: each one the base64 of its little-endian float32s."))


class MultiVectorItem(BaseModel):
    object: Literal["embeddings"] = "embeddings"
    index: int = Field(description="The input's index in the request.")
    embeddings: list[list[float]] | list[str] = Field(description=(
        "The input's token vectors, one per kept token, in token order (unit length when the model normalises)."))


class MultiVectorUsage(BaseModel):
    total_tokens: int = Field(description="Tokens run, special tokens, markers and expansion tokens included.")
    prompt_tokens: int


class MultiVectorResponse(BaseModel):
    object: Literal["list"] = "list"
    model: str
    data: list[MultiVectorItem]
    usage: MultiVectorUsage


class MaxSimRequest(Truncation):
    """attnserve's MaxSim map: a query against a document, token by token."""

    query: Text = Field(description="The query (given the model's query treatment).")
    document: Text = Field(description="The document (given the model's document treatment).")


class MaxSimToken(BaseModel):
    token: str = Field(description="The vocabulary's token ([Q], [MASK] and other added tokens too).")
    start: int = Field(description="Character offset in its text (0 with stop 0: a token the model added).")
    stop: int
    weight: float | None = Field(None, description="Its token weight (bge-m3's sparse_linear), where the model has "
                                 "token weights.")


class MaxSimResponse(BaseModel):
    model: str
    query_tokens: list[MaxSimToken] = Field(description="The query's tokens that have a vector, in order (Q).")
    document_tokens: list[MaxSimToken] = Field(description="The document's (K).")
    similarities: list[list[float]] = Field(description="Q rows of K: each token pair's cosine.")
    best: list[int] = Field(description="Per query token, the index of its best document token.")
    score: float = Field(description="The best similarities summed or averaged over the query tokens (`reduction`): "
                         "what the rerank routes return.")
    reduction: Literal["sum", "mean"]
    usage: MultiVectorUsage


# -- Cohere and Jina -------------------------------------------------------------------------------
class Document(BaseModel):
    model_config = ConfigDict(extra="allow")  # Cohere keeps a document's other fields
    text: Text


class CohereRerankRequest(RerankOptions):
    model_config = ConfigDict(extra="ignore")  # the SDKs send fields such as rank_fields or max_tokens_per_doc

    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them).")
    query: Text = Field(description="The search query.")
    documents: Annotated[list[Text | Document], Field(min_length=1)] = Field(
        description="Texts, or objects with a `text` field, to rank.")
    top_n: Positive | None = Field(None, description="Return only the n most relevant documents (default: all).")
    return_documents: StrictBool = Field(False, description="Return each document with its score.")
    task: Text | None = Field(None, description=TASK)


class CohereDocument(BaseModel):
    text: str


class CohereResult(RankExtras):
    index: int
    relevance_score: float
    document: CohereDocument | None = None


class CohereRerankResponse(BaseModel):
    id: str
    results: list[CohereResult]
    meta: dict[str, object]
    model: str
    usage: dict[str, int]


# -- vLLM ------------------------------------------------------------------------------------------
class ScoreRequest(TruncationFields):
    model_config = ConfigDict(extra="ignore")  # vLLM's sampling-free extras (user, encoding_format, ...)

    model: Text | None = Field(None, description="The served model to use (GET /v1/models lists them).")
    text_1: Text | Texts = Field(description="A text scored against every text_2, or one text per text_2.")
    text_2: Text | Texts = Field(description="A text or texts to score against text_1.")
    task: Text | None = Field(None, description=TASK)


class ScoreItem(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreItem]
    usage: dict[str, int]


# -- token labels ----------------------------------------------------------------------------------
class ClassifyTokensRequest(Tasked, _Request):
    inputs: Text | Texts
    aggregation: Literal["none", "simple", "first", "average", "max"] = Field(
        "none", description="As transformers' token-classification pipeline: none labels each token; simple groups "
        "adjacent tokens of one entity; first, average and max first settle each word's label from its tokens.",
    )
    chunk_overlap: Index = Field(DEFAULT_OVERLAP, description=CHUNK_OVERLAP + " Long texts are always cut into "
                                 "windows; each token is labelled by the window where it sits most centrally.")


class TokenEntity(BaseModel):
    entity: str | None = Field(None, description="The token's label (aggregation none).")
    entity_group: str | None = Field(None, description="The group's entity type (other aggregations).")
    score: float
    index: int | None = Field(None, description="The token's position in the input's encoding (aggregation none).")
    word: str
    start: int = Field(description="Character offset into the input.")
    end: int
