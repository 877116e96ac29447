"""The request and response models of POST /attention: which layers and heads, aggregated how, and the maps as
nested floats or base64 (the route writes them with orjson; these models feed OpenAPI). An image model is sent
images, in the shapes the embedding routes take (service.images), and its maps are over the image's tokens, which
the answer's `grid` places."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from service.images import ImageItem
from service.schemas import Indices, Text, TextInputs, Truncation
from service.tei_schemas import Token

IMAGE_TOKENS = (
    "An image's tokens are its class token \"[CLS]\" (none in SigLIP's), its registers \"[REG 0]\", ... (DINOv2 with "
    "registers), then one per patch, \"patch row,col\", read row by row over `grid`'s rows x cols; each token's "
    "`id` is its position and `special` is true for all but the patches."
)


class AttentionRequest(Truncation):
    inputs: TextInputs | ImageItem | Annotated[list[ImageItem | Text], Field(min_length=1)] = Field(
        description="A text or a list of texts; an image model's (GET /info: `modalities`) images instead: "
        "{\"image\": data URI or base64}, or a list of such items or of data URIs (data:image/png;base64,...): PNG, "
        "JPEG, WebP or GIF. A request of images holds images only, and truncate and task (texts' fields) are refused "
        "with them. URLs are refused, never fetched.")
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
    tokens: list[Token] = Field(description="The tokens the maps are over, in order. " + IMAGE_TOKENS)
    shape: list[int]
    attention: list | str = Field(description="Nested lists of floats, or base64 of `dtype` values in C order.")


class PatchGrid(BaseModel):
    """Where an image's tokens lie on the image the model reads."""

    rows: int = Field(description="Patches down the image.")
    cols: int = Field(description="Patches across the image.")
    first: int = Field(description="Tokens before the patches (the class token, the registers): patch (row, col) "
                       "is token first + row * cols + col.")
    class_token: bool = Field(description="Whether token 0 is a class token (rollout's row 0: the rollout from it).")
    patch_size: int = Field(description="Pixels on a patch's side.")
    height: int = Field(description="Pixels down the image the model reads (each image is prepared to it by the "
                        "model's processor: resized, centre-cropped).")
    width: int = Field(description="Pixels across it.")


class AttentionResponse(BaseModel):
    model: str
    aggregation: str
    encoding: str
    dtype: str
    grid: PatchGrid | None = Field(None, description="An image model's answer only: where its tokens lie. "
                                   + IMAGE_TOKENS)
    data: list[AttentionItem]
