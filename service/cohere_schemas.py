"""Cohere's embed API (POST /v2/embed, what the Cohere SDK's ClientV2.embed and the integrations built on it send):
its request and its `embeddings_by_type` answer. Texts only: `images` and `inputs` (image parts) are refused by
name until images are served."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas import DIMENSIONS, Positive, Text, Texts

CohereInputType = Literal["search_document", "search_query", "classification", "clustering", "image"]
EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
QUANTISED = (
    "int8 and uint8: each dimension's range, the model's own over a fixed set of calibration texts (computed on "
    "first use), cut into 255 steps (uint8 0..255, int8 that minus 128); binary and ubinary: one bit a dimension "
    "(value > 0), eight to a byte, first dimension the high bit (ubinary 0..255, binary that minus 128); base64: "
    "little-endian float32 bytes. As sentence-transformers' quantize_embeddings with calibration embeddings; "
    "docs/embedding-types.md.")


class CohereEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a Cohere field not listed here is refused by name, not dropped

    model: Text | None = Field(None, description="The served model to use (GET /v1/models); default: the first.")
    texts: Texts | None = Field(None, description="The texts to embed, each cut or refused by `truncate`.")
    images: list[Text] | None = Field(None, description="Not served yet: a request with images is refused (422).")
    inputs: list[dict[str, object]] | None = Field(None, description="Not served yet: mixed text and image inputs "
                                                   "are refused (422); send `texts`.")
    input_type: CohereInputType | None = Field(None, description=(
        "search_query: the model's prompt named query; search_document: its prompt named document (else passage); "
        "classification, clustering: its prompt of that name (EmbeddingGemma's have one); a model without such a "
        "prompt embeds the text as given. Default: the model's default prompt. image: refused (no images yet)."))
    embedding_types: list[EmbeddingType] = Field(["float"], min_length=1, description=(
        "Which encodings of each embedding to answer, each under its own key of `embeddings`. " + QUANTISED))
    output_dimension: Positive | None = Field(None, description=DIMENSIONS)
    truncate: Literal["NONE", "START", "END"] = Field("END", description=(
        "A text over the model's max length: END cuts its end, START its start, NONE refuses the request (422)."))
    max_tokens: Positive | None = Field(None, description="Not supported: texts are cut at the model's max length "
                                        "(GET /info); a request that sets it is refused (422).")
    priority: int | None = Field(None, description="Not supported here: send the X-Priority header; a request that "
                                 "sets it is refused (422).")


class CohereEmbeddings(BaseModel):
    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereBilledUnits(BaseModel):
    input_tokens: int = Field(description="Tokens run, special tokens and prompts included.")


class CohereMeta(BaseModel):
    api_version: dict[str, str]
    billed_units: CohereBilledUnits


class CohereEmbedResponse(BaseModel):
    id: str
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"
    embeddings: CohereEmbeddings = Field(description="One list per asked embedding type, a row per text, in order.")
    texts: list[str]
    meta: CohereMeta
