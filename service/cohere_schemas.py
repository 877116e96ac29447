"""Cohere's embed API (POST /v2/embed, what the Cohere SDK's ClientV2.embed and the integrations built on it send):
its request and its `embeddings_by_type` answer. `texts`, an image model's `images` (data URIs, input_type image), or
`inputs` (each one part, text or image_url: a two-tower model takes both in one request; a part is one embedding, no
fused text-and-image vector is made); `max_tokens` and `priority` are refused by name (422); the schema says they take
null only."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from service.schemas import DIMENSIONS, Positive, Text, Texts

CohereInputType = Literal["search_document", "search_query", "classification", "clustering", "image"]
EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
QUANTISED = (
    "int8 and uint8: each dimension's range, the model's own over a fixed set of calibration texts (computed on "
    "first use), cut into 255 steps (uint8 0..255, int8 that minus 128); binary and ubinary: one bit a dimension "
    "(value > 0), eight to a byte, first dimension the high bit (ubinary 0..255, binary that minus 128); base64: "
    "little-endian float32 bytes. As sentence-transformers' quantize_embeddings with calibration embeddings; "
    "docs/embedding-types.md.")


def _refused(what: str) -> BeforeValidator:
    """A Cohere field this server does not serve: null (or absent) only; a value is refused by name (422)."""
    def refuse(value: object) -> object:
        if value is not None:
            raise ValueError(f"{what} is not supported by this server; send `texts`")
        return value
    return BeforeValidator(refuse)


DataUri = Annotated[str, Field(pattern=r"^data:image/[a-zA-Z0-9.+-]+;base64,")]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CohereText(_Part):
    type: Literal["text"]
    text: Text


class CohereImageUrl(_Part):
    url: DataUri = Field(description="The image as a data URI (data:image/png;base64,...); URLs are not fetched.")


class CohereImage(_Part):
    type: Literal["image_url"]
    image_url: CohereImageUrl


class CohereInput(_Part):
    content: Annotated[list[Annotated[CohereText | CohereImage, Field(discriminator="type")]],
                       Field(min_length=1, max_length=1)] = Field(description=(
        "One part: a text or an image. Each input is embedded into a vector of its own; an input of several parts "
        "(Cohere's fused text-and-image embedding) is not served."))


NoMaxTokens = Annotated[None, _refused("max_tokens")]
NoPriority = Annotated[None, _refused("priority (send the X-Priority header)")]


class CohereEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a Cohere field not listed here is refused by name, not dropped

    model: Text | None = Field(None, description="The served model to use (GET /v1/models); default: the first.")
    texts: Texts | None = Field(None, description="The texts to embed, each cut or refused by `truncate`; or `images`.")
    images: Annotated[list[DataUri], Field(min_length=1)] | None = Field(None, description=(
        "An image model's images (GET /info: `modalities`), each a data URI (data:image/png;base64,...), instead of "
        "`texts`; embedding_types int8 and uint8 are refused for them (their ranges are calibrated on texts)."))
    inputs: Annotated[list[CohereInput], Field(min_length=1)] | None = Field(None, description=(
        "Instead of `texts` or `images`: inputs of one part each, {\"content\": [{\"type\": \"text\", \"text\": ...}]} "
        "or {\"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": data URI}}]}, answered in order. Texts "
        "alone are embedded as `texts` are; with images among them (a two-tower model's, GET /info: `modalities`), "
        "input_type, truncate and int8 / uint8 are refused."))
    input_type: CohereInputType | None = Field(None, description=(
        "search_query: the model's prompt named query; search_document: its prompt named document (else passage); "
        "classification, clustering: its prompt of that name (EmbeddingGemma's have one); a model without such a "
        "prompt embeds the text as given. Default: the model's default prompt. image: with `images` (the only "
        "input_type they take)."))
    embedding_types: list[EmbeddingType] = Field(["float"], min_length=1, description=(
        "Which encodings of each embedding to answer, each under its own key of `embeddings`. " + QUANTISED))
    output_dimension: Positive | None = Field(None, description=DIMENSIONS)
    truncate: Literal["NONE", "START", "END"] = Field("END", description=(
        "A text over the model's max length: END cuts its end, START its start, NONE refuses the request (422)."))
    max_tokens: NoMaxTokens = Field(None, description="Not supported: texts are cut at the model's "
                                                  "max length (GET /info); a value is refused (422).")
    priority: NoPriority = Field(
        None, description="Not supported here: send the X-Priority header; a value is refused (422).")

    @model_validator(mode="after")
    def _texts_or_images(self) -> CohereEmbedRequest:
        """One of texts, images and inputs; input_type image with images only, and only it with them."""
        if [self.texts, self.images, self.inputs].count(None) != 2:
            raise ValueError("send `texts`, `images` or `inputs` (one of them)")
        if (self.input_type == "image") != (self.images is not None) and self.input_type is not None:
            raise ValueError("input_type image goes with `images`, and `images` take input_type image or none")
        return self


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
    texts: list[str] | None = Field(None, description="The texts embedded (absent for images).")
    meta: CohereMeta
