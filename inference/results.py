"""What the core answers with: typed results, turned into JSON or binary only by the HTTP front.

Shape letters: N inputs, K windows of all inputs, D hidden (D' after `dimensions`), C labels, n real tokens
of one input, l layers, h heads, k nonzero entries of a sparse vector.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Span:
    """A window's place in its input: characters of a text (positions of token ids), and its content tokens."""

    start: int
    stop: int
    tokens: int  # content tokens (special tokens excluded): the window's weight in a pooled answer


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # (N, D'), or (K, D') one row per window when `spans` is given
    tokens: int  # tokens run, special tokens included (every window's)
    spans: list[list[Span]] | None = None  # per input, its windows, in the order of `vectors`' rows


@dataclass(frozen=True)
class LabelScore:
    label: str
    score: float


@dataclass(frozen=True)
class Scores:
    values: np.ndarray  # (N, C), or (K, C) one row per window when `spans` is given
    labels: list[str]  # the C labels, in column order
    spans: list[list[Span]] | None = None

    def ranked(self, top_k: int | None = None) -> list[list[LabelScore]]:
        """Per row, its labels best first (ties in label order), the top_k best."""
        order = np.argsort(-self.values, axis=-1, kind="stable")[:, :top_k]  # (rows, k)
        return [[LabelScore(self.labels[c], float(row[c])) for c in best]
                for row, best in zip(self.values, order, strict=True)]


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    start: int  # character offsets into the input; (0, 0) for special tokens and token-id inputs
    stop: int
    special: bool


@dataclass(frozen=True)
class AttentionMap:
    tokens: list[Token]
    values: np.ndarray  # (l, h, n, n), (l, n, n) averaged or maxed over heads, or (n, n) rollout


@dataclass(frozen=True)
class GraphOutputs:
    """The fast graph's outputs for N inputs, stacked, not post-processed (the Open Inference Protocol's
    tensors): embeddings (N, D) pooled, not normalised; logits (N, C) when the model has labels."""

    values: dict[str, np.ndarray]
    lengths: list[int]  # each input's tokens
    attention: list[AttentionMap] | None = None  # when asked for, one per input


@dataclass(frozen=True)
class Highlight:
    """One document token's share of the attention flowing from the classification position (rollout)."""

    start: int  # character offsets into the document
    stop: int
    weight: float


@dataclass(frozen=True)
class Match:
    """Late interaction's why: a query token, its best document token and their similarity (MaxSim's term)."""

    query_start: int  # character offsets into the query
    query_stop: int
    start: int  # character offsets into the document
    stop: int
    similarity: float


@dataclass(frozen=True)
class Ranking:
    """A query's documents scored by a cross-encoder or by late interaction (MaxSim), in document order."""

    scores: np.ndarray  # (N,) sigmoid of the logit, or the logit itself (raw); or the MaxSim score
    tokens: int  # tokens run, special tokens included (every window's)
    spans: list[Span] | None = None  # per document, its best window (chunking max)
    explanations: list[list[Highlight]] | None = None  # per document, its tokens' shares (explain)
    matches: list[list[Match]] | None = None  # per document, each query token's best match (MaxSim's explain)

    def order(self, top_n: int | None = None) -> list[int]:
        """Document indices, best first (ties in document order), the top_n best."""
        return [int(i) for i in np.argsort(-self.scores, kind="stable")[:top_n]]


@dataclass(frozen=True)
class SparseVector:
    indices: np.ndarray  # (k,) vocabulary ids with a nonzero weight, ascending
    values: np.ndarray  # (k,) their weights, > 0


@dataclass(frozen=True)
class SparseVectors:
    vectors: list[SparseVector]  # one per input
    tokens: int


@dataclass(frozen=True)
class Entity:
    """A labelled token (aggregation none) or group of tokens, as transformers' token-classification pipeline
    answers: `label` is its `entity` (none) or `entity_group`."""

    label: str
    score: float
    word: str
    start: int  # character offsets into the input text
    end: int
    index: int | None = None  # the token's position in the input's encoding (aggregation none)


def grouped(rows: Sequence[T] | np.ndarray, spans: Sequence[Sequence[Span]]) -> Iterator[list[tuple[Span, Any]]]:
    """Rows of all windows, in order -> per input, each window's span with its row."""
    at = 0
    for windows in spans:
        yield list(zip(windows, rows[at: at + len(windows)], strict=True))
        at += len(windows)
