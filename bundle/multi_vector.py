"""The manifest's `multi_vector` section: how a multi-vector model's graph outputs (ColBERT's token vectors,
bge-m3's colbert_vecs and lexical weights) become what its reference returns, and how its queries and
documents are fed (inference/tasks/multi_vector_feeds.py and multi_vector_scores.py read it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MultiVectorSpec(BaseModel):
    """How a multi-vector model's graph outputs become what its reference returns. Queries and documents may be
    treated differently (ColBERT): the fields say for which."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # as every manifest section

    # M: width of the graph's multi_vectors (0: the model has token_weights only)
    size: int = Field(ge=0)
    # L2-normalise each token vector (PyLate, colbert-ai and bge-m3 all do)
    normalize: bool = True
    # MaxSim's reduction over query tokens: "sum" (PyLate, colbert-ai) or "mean" (bge-m3's colbert_score)
    reduction: Literal["sum", "mean"] = "sum"
    # drop the first position's vector (bge-m3's colbert_vecs leave out the CLS token), queries and documents
    skip_first_token: bool = False
    # inserted before the text: a string prepended to it (prefix_ids empty), or when query_prefix_ids /
    # document_prefix_ids are given, those token ids inserted after the first (CLS) token, as PyLate inserts
    # "[Q] " / "[D] " and colbert-ai its [unused0] / [unused1]; "" and []: nothing
    query_prefix: str = ""
    document_prefix: str = ""
    query_prefix_ids: list[int] = Field(default_factory=list)
    document_prefix_ids: list[int] = Field(default_factory=list)
    # query expansion: queries padded to query_length tokens with expansion_token_id (PyLate's and colbert-ai's
    # [MASK]); 0: no expansion (a query is as long as its tokens)
    query_length: int = Field(default=0, ge=0)
    expansion_token_id: int | None = None
    # whether the expansion tokens are attended to (attention_mask 1 on them): colbert-ai yes, PyLate as configured
    attend_to_expansion: bool = False
    # longest document in tokens (0: the bundle's max_length)
    document_length: int = Field(default=0, ge=0)
    # document token ids whose vectors are dropped (the punctuation skip-list of PyLate and colbert-ai)
    skip_ids: list[int] = Field(default_factory=list)
    # token ids dropped from the lexical weights (bge-m3: the tokenizer's cls, eos, pad and unk ids)
    sparse_drop_ids: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _expansion_token(self) -> MultiVectorSpec:
        if self.query_length and self.expansion_token_id is None:
            raise ValueError("query_length > 0 (query expansion) needs the expansion_token_id queries are padded with")
        return self
