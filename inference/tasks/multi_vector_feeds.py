"""ColBERT's queries and documents as a graph is fed them, torch-free: the bundle's tokenizer and its
bundle.multi_vector.MultiVectorSpec say how, as PyLate and colbert-ai tokenise.

Shape letters: B batch, T sequence, M multi-vector width, N kept tokens of an input.

    ColbertFeeder   one bundle's feeds (queries, documents), its truncating tokenizers made once; query_feed and
                    document_feed make one for a single batch
    queries         each query cut to query_length less its prefix ids, the prefix ids inserted after the first
                    ([CLS]) token, then padded to query_length with the expansion token ([MASK]): attended
                    (attention_mask 1) only when spec.attend_to_expansion, but every position kept, since its
                    vector takes part in MaxSim (query expansion); without expansion (query_length 0) a query is
                    cut at max_length and padded like a document
    documents       each document cut to document_length (or max_length) less its prefix ids, the prefix inserted
                    after [CLS], right-padded with the pad id; its real tokens kept (the skip-list is applied with
                    the vectors: inference.tasks.multi_vector_scores.token_vectors(document=True))
    token_vectors   a fed batch's (B, T, M) multi_vectors -> each input's (N, M) vectors, as the references return
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from bundle.multi_vector import MultiVectorSpec
from inference.tasks import multi_vector_scores


@dataclass(frozen=True)
class Feed:
    """A batch as the graph takes it, and the positions whose vectors are the input's."""

    input_ids: np.ndarray  # (B, T) int64
    attention_mask: np.ndarray  # (B, T) int64: what the graph attends to
    keep: np.ndarray  # (B, T) bool: the positions whose vectors are kept (before the skip-list)
    document: bool  # documents drop spec.skip_ids; queries keep every kept position
    offsets: list[list[tuple[int, int]]]  # per input, each fed token's characters in its text ((0, 0): added)
    lengths: list[int]  # per input, the positions fed (its real tokens, and a query's expansion tokens)


class ColbertFeeder:
    """Queries and documents of one bundle as its graph is fed them; the truncating tokenizers are made once."""

    def __init__(self, tokenizer: Tokenizer, spec: MultiVectorSpec, max_length: int, pad_id: int) -> None:
        self.spec, self.pad = spec, pad_id  # the bundle's (manifest.pad_id): documents are right-padded with it
        self.query_length = spec.query_length or max_length
        self.document_length = min(spec.document_length or max_length, max_length)
        self._queries = _truncating(tokenizer, self.query_length - len(spec.query_prefix_ids))
        self._documents = _truncating(tokenizer, self.document_length - len(spec.document_prefix_ids))

    def queries(self, texts: Sequence[str]) -> Feed:
        spec = self.spec
        ids, offsets = _prefixed(self._queries, texts, spec.query_prefix, spec.query_prefix_ids)
        if not spec.query_length:
            return _padded(ids, offsets, self.pad, document=False)
        assert spec.expansion_token_id is not None  # MultiVectorSpec requires it with query_length
        input_ids = np.full((len(ids), self.query_length), spec.expansion_token_id, dtype=np.int64)  # (B, T)
        attention_mask = np.full((len(ids), self.query_length), int(spec.attend_to_expansion), dtype=np.int64)
        for row, sequence in enumerate(ids):
            input_ids[row, :len(sequence)], attention_mask[row, :len(sequence)] = sequence, 1
        expanded = [spans + [(0, 0)] * (self.query_length - len(spans)) for spans in offsets]
        return Feed(input_ids, attention_mask, np.ones_like(input_ids, dtype=bool), False, expanded,
                    [self.query_length] * len(ids))

    def documents(self, texts: Sequence[str]) -> Feed:
        spec = self.spec
        ids, offsets = _prefixed(self._documents, texts, spec.document_prefix, spec.document_prefix_ids)
        return _padded(ids, offsets, self.pad, document=True)


def query_feed(tokenizer: Tokenizer, texts: Sequence[str], spec: MultiVectorSpec, max_length: int,
               pad_id: int) -> Feed:
    """One batch of queries (ColbertFeeder(...).queries, for a caller that does not keep a feeder)."""
    return ColbertFeeder(tokenizer, spec, max_length, pad_id).queries(texts)


def document_feed(tokenizer: Tokenizer, texts: Sequence[str], spec: MultiVectorSpec, max_length: int,
                  pad_id: int) -> Feed:
    """One batch of documents (ColbertFeeder(...).documents)."""
    return ColbertFeeder(tokenizer, spec, max_length, pad_id).documents(texts)


def token_vectors(multi_vectors: np.ndarray, feed: Feed, spec: MultiVectorSpec) -> list[np.ndarray]:
    """(B, T, M) graph output for `feed` -> each input's (N, M) vectors (normalised, skip-list dropped, as the spec
    says)."""
    return [multi_vector_scores.token_vectors(multi_vectors[row], feed.input_ids[row], feed.keep[row], spec,
                                              document=feed.document) for row in range(len(feed.input_ids))]


def _truncating(tokenizer: Tokenizer, length: int) -> Tokenizer:
    """A copy of `tokenizer` that cuts to `length` tokens, special tokens kept (as it truncates), never padding."""
    cutting = Tokenizer.from_str(tokenizer.to_str())
    cutting.no_padding()
    cutting.enable_truncation(length)
    return cutting


def _prefixed(cutting: Tokenizer, texts: Sequence[str], prefix: str,
              prefix_ids: Sequence[int]) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Token ids of `prefix` + each text (cut by `cutting` to the length less the prefix ids), the prefix ids
    inserted after the first token; and each token's characters in its text (the prefix's and the inserted
    ids': (0, 0))."""
    ids, offsets = [], []
    for encoding in cutting.encode_batch([prefix + t for t in texts]):
        ids.append(encoding.ids[:1] + list(prefix_ids) + encoding.ids[1:])
        spans = [(max(a - len(prefix), 0), max(b - len(prefix), 0)) for a, b in encoding.offsets]
        offsets.append(spans[:1] + [(0, 0)] * len(prefix_ids) + spans[1:])
    return ids, offsets


def _padded(ids: list[list[int]], offsets: list[list[tuple[int, int]]], pad: int, document: bool) -> Feed:
    width = max(len(sequence) for sequence in ids)
    input_ids = np.full((len(ids), width), pad, dtype=np.int64)  # (B, T)
    attention_mask = np.zeros((len(ids), width), dtype=np.int64)  # (B, T)
    for row, sequence in enumerate(ids):
        input_ids[row, :len(sequence)], attention_mask[row, :len(sequence)] = sequence, 1
    return Feed(input_ids, attention_mask, attention_mask.astype(bool), document, offsets, [len(s) for s in ids])
