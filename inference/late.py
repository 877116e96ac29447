"""Late interaction, the requests: a multi-vector model's token vectors (ColBERT's, bge-m3's colbert_vecs), its
outputs of one run together (bge-m3: the dense vector, the lexical weights and the token vectors), and documents
ranked by MaxSim. The arithmetic is `inference.multivector`'s; the manifest's `multi_vector` spec says how a
model's queries and documents are prepared and its vectors kept.

Every request runs the `MULTI` kind: one run of the fast graph's session gives every output the model has. The
size of the token vectors an answer would carry is checked against `embed_all_cap_bytes` before any graph runs.

Shape letters: N inputs, n tokens of one input, k kept tokens, M token-vector width (M' after `dimensions`),
D pooled width, Q query tokens, K document tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bundle.manifest import MultiVectorSpec
from inference import chunking, multivector, postprocess
from inference.errors import InvalidRequest, ResponseTooLarge, Unsupported
from inference.graphs import MULTI
from inference.limits import Inputs, check_dimensions, estimated_bytes
from inference.options import RequestLimits
from inference.results import Match, Ranking, Span, SparseVector
from inference.served import ServedModel
from inference.sparse import lexical
from inference.tokenize import Direction, Encoded

InputKind = Literal["query", "document"]
Output = Literal["dense", "sparse", "multi"]
OUTPUTS: tuple[Output, ...] = ("dense", "sparse", "multi")
MULTI_ONLY: tuple[Output, ...] = ("multi",)


@dataclass(frozen=True)
class MultiOutputs:
    """What one run gave, per input, for the outputs asked for (None: not asked for)."""

    tokens: int  # tokens run, special tokens included
    encoded: list[Encoded]
    dense: np.ndarray | None = None  # (N, D') pooled, normalised as the model is, cut to `dimensions`
    sparse: list[SparseVector] | None = None  # per input, its lexical weights
    multi: list[np.ndarray] | None = None  # per input, (k, M') token vectors
    positions: list[np.ndarray] | None = None  # per input, (k,) the token position of each vector
    prefix: int = 0  # characters of the prefix put before each text (its offsets count them)


async def encode(
    model: ServedModel, inputs: Inputs, *, input_type: InputKind = "document", outputs: Collection[Output] = MULTI_ONLY,
    dimensions: int | None = None, truncate: bool | None = None, direction: Direction = "right",
    normalize: bool | None = None,
) -> MultiOutputs:
    """The outputs asked for, from one run: `multi` each input's token vectors as the model keeps them for a query
    or a document (cut to `dimensions` and renormalised, Matryoshka style), `dense` its pooled vector (cut the
    same way; L2-normalised as `normalize` says, by default as the model's manifest does), `sparse` its lexical
    weights."""
    wanted = set(outputs)
    if not wanted:
        raise InvalidRequest("ask for at least one of the outputs dense, sparse, multi", code="no_outputs")
    if not model.multi_outputs:
        model.require("multi_vector", "give multi-vector outputs (it has no multi-vector output)")
    if "multi" in wanted:
        model.require("multi_vector", "give token vectors (it has token weights only)")
    if "sparse" in wanted and "token_weights" not in model.multi_outputs:
        raise Unsupported(f"model {model.name} cannot give lexical weights (it has no token weights)")
    spec = _spec(model)
    check_dimensions(dimensions, spec.size if "multi" in wanted else model.bundle.manifest.embedding_size)
    width = (dimensions or spec.size) if "multi" in wanted else 0
    prefix = spec.query_prefix if input_type == "query" else spec.document_prefix
    encoded, runs = await model.run(inputs, [MULTI], truncate, direction, prompt=prefix,
                                    check=lambda e: check_multi_size(model.limits, e, width))
    ran, document = runs[MULTI], input_type == "document"
    dense = sparse = multi = positions = None
    if "dense" in wanted:
        pooled = np.stack([o["embeddings"] for o in ran])  # (N, D)
        unit = model.bundle.manifest.normalize if normalize is None else normalize
        dense = postprocess.embeddings(pooled, unit, dimensions)
    if "sparse" in wanted:
        sparse = [lexical(o["token_weights"], e.ids, spec.sparse_drop_ids) for o, e in zip(ran, encoded, strict=True)]
    if "multi" in wanted:
        everything = [np.ones_like(e.ids) for e in encoded]  # (n,) the run's outputs are over real tokens only
        positions = [multivector.kept_positions(e.ids, keep, spec, document)
                     for e, keep in zip(encoded, everything, strict=True)]
        multi = [_cut(multivector.token_vectors(o["multi_vectors"], e.ids, keep, spec, document), dimensions)
                 for o, e, keep in zip(ran, encoded, everything, strict=True)]
    return MultiOutputs(sum(e.length for e in encoded), encoded, dense, sparse, multi, positions, len(prefix))


async def rerank(
    model: ServedModel, query: str, documents: Sequence[str], *, truncate: bool | None = None,
    direction: Direction = "right", overlap: int | None = None, explain: bool = False,
) -> Ranking:
    """Each document's MaxSim score against `query` (the model's reduction over the query's tokens), in document
    order; with `overlap`, a long document is cut into windows (that many tokens shared) and gets its best
    window's score and span; with `explain`, per query token its best document token's span and their
    similarity."""
    model.require("multi_vector", "rank by late interaction (it has no multi-vector output)")
    spec = _spec(model)
    asked = await encode(model, [query], input_type="query", truncate=truncate, direction=direction)
    assert asked.multi is not None and asked.positions is not None  # asked for
    question = _Side(asked.encoded[0], asked.positions[0], asked.prefix)
    if overlap is None:
        found = await encode(model, list(documents), input_type="document", truncate=truncate, direction=direction)
        assert found.multi is not None and found.positions is not None
        sides = [_Side(e, p, found.prefix) for e, p in zip(found.encoded, found.positions, strict=True)]
        scored = [_maxsim(asked.multi[0], vectors, spec) for vectors in found.multi]
        spans, tokens = None, found.tokens
    else:
        if spec.document_prefix:
            raise Unsupported(f"model {model.name} puts a prefix before its documents: its windows cannot keep "
                              "their character offsets; send the documents truncated")
        cut = functools.partial(chunking.cut, keep_tokens=True)
        windows, grouped, _ = await model.run_cut(list(documents), overlap, MULTI, cut)
        scored, sides, spans = [], [], []
        for ws, outs in zip(windows, grouped, strict=True):
            kept = [multivector.kept_positions(w.ids, np.ones_like(w.ids), spec, True) for w in ws]
            each = [_maxsim(asked.multi[0], _cut(multivector.token_vectors(o["multi_vectors"], w.ids,
                                                                           np.ones_like(w.ids), spec, True), None),
                            spec) for w, o in zip(ws, outs, strict=True)]
            best = int(np.argmax([s.score if s is not None else 0.0 for s in each]))  # the first of equals
            chosen = ws[best]
            assert chosen.encoded is not None  # keep_tokens
            scored.append(each[best])
            sides.append(_Side(chosen.encoded, kept[best], 0))
            spans.append(Span(chosen.start, chosen.stop, chosen.tokens))
        tokens = sum(w.length for ws in windows for w in ws)
    scores = np.asarray([s.score if s is not None else 0.0 for s in scored], dtype=np.float32)  # (N,)
    matches = [_matches(s, question, side) for s, side in zip(scored, sides, strict=True)] if explain else None
    return Ranking(scores, asked.tokens + tokens, spans, None, matches)


def _maxsim(query: np.ndarray, document: np.ndarray, spec: MultiVectorSpec) -> multivector.MaxSim | None:
    """MaxSim of (Q, M) and (K, M) vectors; None for a document with no kept token (it scores 0)."""
    return multivector.explain(query, document, spec.reduction) if len(document) and len(query) else None


def check_multi_size(limits: RequestLimits, encoded: list[Encoded], width: int) -> None:
    """ResponseTooLarge (before any graph runs) when the token vectors of `encoded`, `width` floats each, would
    pass the answer cap (embed_all_cap_bytes)."""
    total = estimated_bytes(sum(e.length for e in encoded) * width, "float", "float32")
    if total > limits.embed_all_cap_bytes:
        raise ResponseTooLarge(f"the token vectors would take about {total} bytes, over the cap of "
                               f"{limits.embed_all_cap_bytes} bytes (ATTNSERVE_EMBED_ALL_CAP_BYTES); send fewer or "
                               "shorter inputs, or ask for fewer dimensions")


def _spec(model: ServedModel) -> MultiVectorSpec:
    spec = model.bundle.manifest.multi_vector
    if spec is None:  # require() has refused such a model already
        raise InvalidRequest(f"model {model.name} is not a multi-vector model", code="unsupported")
    return spec


def _cut(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """(k, M) -> (k, M'): the first `dimensions` of each vector, renormalised (Matryoshka style)."""
    return vectors if dimensions is None else multivector.normalize(vectors[:, :dimensions])


@dataclass(frozen=True)
class _Side:
    encoded: Encoded
    positions: np.ndarray  # (k,) the token position of each kept vector
    prefix: int  # characters of the prefix before the text

    def span(self, index: int) -> tuple[int, int]:
        """The characters of the text (not of its prefix) that kept vector `index` stands for."""
        start, stop = self.encoded.offsets[int(self.positions[index])]
        return max(start - self.prefix, 0), max(stop - self.prefix, 0)


def _matches(scored: multivector.MaxSim | None, query: _Side, document: _Side) -> list[Match]:
    """Per kept query token, the character spans of it and of its best document token, and their similarity."""
    if scored is None:
        return []
    return [Match(*query.span(q), *document.span(d), float(similarity))
            for q, (d, similarity) in enumerate(zip(scored.best.tolist(), scored.similarity.tolist(), strict=True))]
