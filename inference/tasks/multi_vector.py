"""Late interaction, the requests: a multi-vector model's token vectors (ColBERT's, bge-m3's colbert_vecs), its
outputs of one run together (bge-m3: the dense vector, the lexical weights and the token vectors), and documents
ranked by MaxSim. The arithmetic is `inference.tasks.multi_vector_scores`'s; the manifest's `multi_vector` spec says
how a
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

from bundle.multi_vector import MultiVectorSpec
from inference import chunking, postprocess
from inference.errors import InvalidRequest, ResponseTooLarge, Unsupported
from inference.limits import Inputs, check_dimensions, check_inputs, estimated_bytes
from inference.options import RequestLimits
from inference.results import Match, Ranking, Span, SparseVector
from inference.runtime.graphs import MULTI, Outputs, TokenSequence
from inference.runtime.tokenize import Direction
from inference.served import ServedModel
from inference.tasks import multi_vector_feeds, multi_vector_scores
from inference.tasks.sparse import lexical

InputKind = Literal["query", "document"]
Output = Literal["dense", "sparse", "multi"]
OUTPUTS: tuple[Output, ...] = ("dense", "sparse", "multi")
MULTI_ONLY: tuple[Output, ...] = ("multi",)


@dataclass(frozen=True)
class MultiOutputs:
    """What one run gave, per input, for the outputs asked for (None: not asked for)."""

    tokens: int  # tokens run, special tokens (and ColBERT's markers and expansion tokens) included
    lengths: list[int]  # per input, the tokens it ran
    offsets: list[list[tuple[int, int]]]  # per input, each token's characters in its text ((0, 0): added tokens)
    dense: np.ndarray | None = None  # (N, D') pooled, normalised as the model is, cut to `dimensions`
    sparse: list[SparseVector] | None = None  # per input, its lexical weights
    multi: list[np.ndarray] | None = None  # per input, (k, M') token vectors
    positions: list[np.ndarray] | None = None  # per input, (k,) the token position of each vector
    ids: list[np.ndarray] | None = None  # per input, (n,) the token ids it ran
    weights: list[np.ndarray] | None = None  # per input, (n,) each token's weight (with `sparse`)


async def encode(
    model: ServedModel, inputs: Inputs, *, input_type: InputKind = "document", outputs: Collection[Output] = MULTI_ONLY,
    dimensions: int | None = None, truncate: bool | None = None, direction: Direction = "right",
    normalize: bool | None = None,
) -> MultiOutputs:
    """The outputs asked for, from one run: `multi` each input's token vectors as the model keeps them for a query
    or a document (cut to `dimensions` and renormalised, Matryoshka style), `dense` its pooled vector (cut the
    same way; L2-normalised as `normalize` says, by default as the model's manifest does), `sparse` its lexical
    weights. A ColBERT model's inputs are fed as its references feed them (inference.tasks.multi_vector_feeds: markers,
    queries
    expanded, cut at its query or document length whatever `truncate` says)."""
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
    document = input_type == "document"
    if fed(spec):
        ids, keep, offsets, ran = await _run_fed(model, inputs, document, width)
    else:
        prefix = spec.document_prefix if document else spec.query_prefix
        encoded, runs = await model.run(inputs, [MULTI], truncate, direction, prompt=prefix,
                                        check=lambda e: check_multi_size(model.limits, [x.length for x in e], width))
        ran, ids = runs[MULTI], [e.ids for e in encoded]
        keep = [np.ones_like(e.ids) for e in encoded]  # the run's outputs are over real tokens only
        offsets = [[(max(a - len(prefix), 0), max(b - len(prefix), 0)) for a, b in e.offsets] for e in encoded]
    dense = sparse = multi = positions = weights = None
    if "dense" in wanted:
        pooled = np.stack([o["embeddings"] for o in ran])  # (N, D)
        unit = model.bundle.manifest.normalize if normalize is None else normalize
        dense = postprocess.embeddings(pooled, unit, dimensions)
    if "sparse" in wanted:
        sparse = [lexical(o["token_weights"], i, spec.sparse_drop_ids) for o, i in zip(ran, ids, strict=True)]
        weights = [o["token_weights"] for o in ran]
    if "multi" in wanted:
        positions = [multi_vector_scores.kept_positions(i, k, spec, document) for i, k in zip(ids, keep, strict=True)]
        multi = [_cut(multi_vector_scores.token_vectors(o["multi_vectors"], i, k, spec, document), dimensions)
                 for o, i, k in zip(ran, ids, keep, strict=True)]
    lengths = [len(i) for i in ids]
    return MultiOutputs(sum(lengths), lengths, offsets, dense, sparse, multi, positions, ids, weights)


def fed(spec: MultiVectorSpec) -> bool:
    """Whether the model's inputs are fed as ColBERT's references feed them (marker ids, query expansion)."""
    return bool(spec.query_prefix_ids or spec.document_prefix_ids or spec.query_length or spec.document_length)


_FEEDERS: dict[str, multi_vector_feeds.ColbertFeeder] = {}  # by the bundle's fingerprint (its content): one per model


async def _run_fed(model: ServedModel, inputs: Inputs, document: bool,
                   width: int) -> tuple[list[np.ndarray], list[np.ndarray], list[list[tuple[int, int]]], list[Outputs]]:
    """ColBERT's feeding (inference.tasks.multi_vector_feeds), through the model's admission and batches: per input its
    ids, the
    positions whose vectors are kept, the tokens' characters, and its outputs."""
    check_inputs(model.limits, inputs)
    if not all(isinstance(item, str) for item in inputs):
        raise InvalidRequest(f"model {model.name} takes texts (its queries and documents get marker tokens)",
                             code="texts_only")
    tokenizer, spec = model.bundle.tokenizer, _spec(model)
    feeder = _FEEDERS.get(model.fingerprint)  # no per-request serialising of the spec
    if feeder is None:
        feeder = multi_vector_feeds.ColbertFeeder(tokenizer.truncating, spec, tokenizer.max_length,
                                                  model.bundle.manifest.pad_id)
        _FEEDERS[model.fingerprint] = feeder
    feed = await model.maybe_off_loop(inputs, feeder.documents if document else feeder.queries, inputs)
    check_multi_size(model.limits, feed.lengths, width)
    ids = [feed.input_ids[row, :n] for row, n in enumerate(feed.lengths)]  # (n,) each
    sequences = [TokenSequence(i, attended=feed.attention_mask[row, :len(i)]) for row, i in enumerate(ids)]
    runs = await model.run_sequences(sequences, [MULTI])
    keep = [feed.keep[row, :len(i)] for row, i in enumerate(ids)]
    return ids, keep, feed.offsets, runs[MULTI]


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
    question = _Side(asked.offsets[0], asked.positions[0])
    if overlap is None:
        found = await encode(model, list(documents), input_type="document", truncate=truncate, direction=direction)
        assert found.multi is not None and found.positions is not None
        sides = [_Side(o, p) for o, p in zip(found.offsets, found.positions, strict=True)]
        scored = [_maxsim(asked.multi[0], vectors, spec) for vectors in found.multi]
        spans, tokens = None, found.tokens
    else:
        if spec.document_prefix or fed(spec):
            raise Unsupported(f"model {model.name} marks its documents (a prefix): its windows cannot be cut as "
                              "its documents are; send the documents truncated (it cuts them at its length)")
        cut = functools.partial(chunking.cut, keep_tokens=True)
        windows, grouped, _ = await model.run_cut(list(documents), overlap, MULTI, cut)
        scored, sides, spans = [], [], []
        for ws, outs in zip(windows, grouped, strict=True):
            kept = [multi_vector_scores.kept_positions(w.ids, np.ones_like(w.ids), spec, True) for w in ws]
            vectors = [_cut(multi_vector_scores.token_vectors(o["multi_vectors"], w.ids, np.ones_like(w.ids), spec,
                                                              True), None) for w, o in zip(ws, outs, strict=True)]
            each = [_maxsim(asked.multi[0], v, spec) for v in vectors]
            best = int(np.argmax([s.score if s is not None else 0.0 for s in each]))  # the first of equals
            chosen = ws[best]
            assert chosen.encoded is not None  # keep_tokens
            scored.append(each[best])
            sides.append(_Side(chosen.encoded.offsets, kept[best]))
            spans.append(Span(chosen.start, chosen.stop, chosen.tokens))
        tokens = sum(w.length for ws in windows for w in ws)
    scores = np.asarray([s.score if s is not None else 0.0 for s in scored], dtype=np.float32)  # (N,)
    matches = [_matches(s, question, side) for s, side in zip(scored, sides, strict=True)] if explain else None
    return Ranking(scores, asked.tokens + tokens, spans, None, matches)


@dataclass(frozen=True)
class MaxSimMap:
    """What the explorer draws: every query token against every document token, and how the score comes of it."""

    query: list[KeptToken]  # the query's kept tokens (those with a vector), in order
    document: list[KeptToken]  # the document's
    similarities: np.ndarray  # (Q, K) each pair's cosine (the vectors' dot product)
    best: np.ndarray  # (Q,) each query token's best document token
    score: float  # MaxSim: the best similarities summed or averaged (`reduction`)
    reduction: str
    tokens: int


@dataclass(frozen=True)
class KeptToken:
    token: str  # the vocabulary's token ([Q], [MASK] and other added tokens too)
    start: int  # its characters in the text ((0, 0): an added token)
    stop: int
    weight: float | None  # its token weight (a model with token weights: bge-m3's sparse_linear), else None


async def maxsim_map(model: ServedModel, query: str, document: str, *, truncate: bool | None = None,
                     direction: Direction = "right") -> MaxSimMap:
    """`query` (as a query) against `document` (as a document): every kept token pair's similarity, each query
    token's best match and the score, as `rerank` scores them."""
    model.require("multi_vector", "draw a MaxSim map (it has no multi-vector output)")
    spec = _spec(model)
    wanted: tuple[Output, ...] = ("multi", "sparse") if "token_weights" in model.multi_outputs else MULTI_ONLY
    asked = await encode(model, [query], input_type="query", outputs=wanted, truncate=truncate, direction=direction)
    found = await encode(model, [document], input_type="document", outputs=wanted, truncate=truncate,
                         direction=direction)
    assert asked.multi is not None and found.multi is not None  # asked for
    scored = _maxsim(asked.multi[0], found.multi[0], spec)
    if scored is None:
        raise InvalidRequest("the document has no token with a vector (all were skipped)", code="empty_document")
    similarities = asked.multi[0] @ found.multi[0].T  # (Q, K)
    return MaxSimMap(_kept(model, asked), _kept(model, found), similarities.astype(np.float32), scored.best,
                     scored.score, spec.reduction, asked.tokens + found.tokens)


def _kept(model: ServedModel, found: MultiOutputs) -> list[KeptToken]:
    """The one input's kept tokens of `found` with their vocabulary token, characters and weight."""
    assert found.positions is not None and found.ids is not None
    vocabulary = model.bundle.tokenizer.truncating
    weights = found.weights[0] if found.weights is not None else None
    out = []
    for position in found.positions[0].tolist():
        start, stop = found.offsets[0][position]
        token = vocabulary.id_to_token(int(found.ids[0][position])) or ""
        out.append(KeptToken(token, start, stop, float(weights[position]) if weights is not None else None))
    return out


def _maxsim(query: np.ndarray, document: np.ndarray, spec: MultiVectorSpec) -> multi_vector_scores.MaxSim | None:
    """MaxSim of (Q, M) and (K, M) vectors; None for a document with no kept token (it scores 0)."""
    return multi_vector_scores.explain(query, document, spec.reduction) if len(document) and len(query) else None


def check_multi_size(limits: RequestLimits, lengths: Sequence[int], width: int) -> None:
    """ResponseTooLarge (before any graph runs) when the token vectors of inputs of `lengths` tokens, `width`
    floats each, would pass the answer cap (embed_all_cap_bytes)."""
    total = estimated_bytes(sum(lengths) * width, "float", "float32")
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
    return vectors if dimensions is None else multi_vector_scores.normalize(vectors[:, :dimensions])


@dataclass(frozen=True)
class _Side:
    offsets: list[tuple[int, int]]  # each token's characters in its text
    positions: np.ndarray  # (k,) the token position of each kept vector

    def span(self, index: int) -> tuple[int, int]:
        """The characters of the text that kept vector `index` stands for ((0, 0): an added token's)."""
        return self.offsets[int(self.positions[index])]


def _matches(scored: multi_vector_scores.MaxSim | None, query: _Side, document: _Side) -> list[Match]:
    """Per kept query token, the character spans of it and of its best document token, and their similarity."""
    if scored is None:
        return []
    return [Match(*query.span(q), *document.span(d), float(similarity))
            for q, (d, similarity) in enumerate(zip(scored.best.tolist(), scored.similarity.tolist(), strict=True))]
