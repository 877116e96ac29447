"""The request and response models of POST /attention: which layers and heads, aggregated how, and the maps as
nested floats or base64 (the route writes them with orjson; these models feed OpenAPI)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from service.schemas import Indices, TextInputs, Truncation
from service.tei_schemas import Token


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
