"""The request and response models of text-embeddings-inference's routes: /embed, /classify, /predict,
/similarity, /embed_all, /tokenize and /decode, in TEI's shapes with attnserve's optional additions (`model`,
`chunking`, `chunk_overlap`, `task`). Requests are validated by pydantic; responses are documented here and written
by orjson straight from numpy (the route returns the bytes, these models feed OpenAPI)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool

from service.images import ImageItem
from service.schemas import (
    DIMENSIONS,
    INSTRUCTION,
    PROMPT_NAME,
    Chunked,
    Instruction,
    Positive,
    Tasked,
    Text,
    TextInputs,
    Texts,
    TokenIds,
    Truncation,
    TruncationFields,
    WindowSpan,
    _Request,
    _Strict,
)

RAW_SCORES = ("Return the raw logits instead of scores. Scores are softmax probabilities over the labels, or, for "
              "a model with a single label (a cross-encoder's relevance), the sigmoid of its logit.")


class EmbeddingWindow(WindowSpan):
    embedding: list[float]


class Prompted(_Strict):
    prompt_name: Text | None = Field(None, description=PROMPT_NAME)
    instruction: Instruction | None = Field(None, description=INSTRUCTION)


class EmbedRequest(Truncation, Chunked, Prompted):
    inputs: TextInputs | ImageItem | Annotated[list[ImageItem | Text], Field(min_length=1)] = Field(
        description="A text or a list of texts; an image model's (GET /info: `modalities`) images instead: "
        "{\"image\": data URI or base64}, or a list of such items or of data URIs (data:image/png;base64,...). A "
        "request of images holds images only; chunking, prompts, instructions, tasks and truncation do not apply "
        "to them. URLs are refused.")
    normalize: StrictBool = Field(True, description="L2-normalise the pooled vectors.")
    dimensions: Positive | None = Field(None, description=DIMENSIONS)


class ClassifyRequest(Truncation, Chunked):
    inputs: TextInputs | ImageItem | Annotated[list[ImageItem | Text], Field(min_length=1)] = Field(
        description="A text or a list of texts; an image classifier's (GET /info: `modalities`) images instead: "
        "{\"image\": data URI or base64}, or a list of such items or of data URIs (data:image/png;base64,...). A "
        "request of images holds images only; chunking, tasks and truncation do not apply to them.")
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
    inputs: Text | One | Annotated[list[One], Field(min_length=1)] | ImageItem | Annotated[
            list[ImageItem], Field(min_length=1)] = Field(
        description="A text, [text] or a pair [text, text]: answered with one list of labels; or a batch [[text], "
        "[text, text], ...]: one list per input. Pairs go through the tokenizer's pair template (with token "
        "type ids where the model has them). An image classifier's (GET /info: `modalities`) images instead: "
        "{\"image\": data URI or base64} (one list of labels) or a list of them (one list per image).",
    )
    raw_scores: StrictBool = Field(False, description=RAW_SCORES)
    parameters: PredictParameters | None = None


class SimilarityInput(_Strict):
    source_sentence: Text = Field(description="The text the others are compared with; for a model that reads images "
                                  "(GET /info: `modalities`), an image's data URI (data:image/png;base64,...).")
    sentences: Texts = Field(description="Texts compared with source_sentence (cosine similarity); for a model that "
                             "reads images, data URIs of images too (a two-tower model: images and texts in one "
                             "space, CLIP's and SigLIP's image-text similarity).")


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
