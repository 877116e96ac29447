"""Cross-encoders: a query's documents scored as (query, document) pairs, and any text pairs scored over a
classifier's labels. Pairs go through the tokenizer's pair template with their token type ids, join the
dynamic batch as the `PAIRS` kind (the fast graph's session, logits only) and take one admission permit each.

Scores are the model's: a one-label cross-encoder's logit through a sigmoid (as sentence-transformers'
CrossEncoder), or the logit itself when raw. With chunking ("max"), a long document is cut into windows,
each scored after the query (`inference.chunking.cut_pairs`), and gets its best window's score and span.
With `explain`, each document's best (or only) pair also runs through the attention graph in the same
admission, and its tokens get their share of the attention that flows from the classification position
(the first token, or the last for a model that pools its last token, as decoders do), by rollout over every
layer (`inference.postprocess.rollout`). An LLM reranker writes each pair into its prompt (the manifest's
`pair_format`): its pairs are not split into query and document tokens, so it explains no score and scores no
windows; a long document is cut to fit, as its authors' code cuts it.

Shape letters: N documents, K windows of all documents, C labels, L layers, H heads, n tokens of one pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from inference import chunking, postprocess, rules
from inference.chunking import Window
from inference.errors import Unsupported
from inference.limits import AttentionQuery
from inference.results import Highlight, Ranking, Scores, Span
from inference.runtime.graphs import ATTENTION, PAIRS, Outputs
from inference.runtime.tokenize import Direction, Encoded, Pair
from inference.scheduling.batcher import Ticket
from inference.served import ServedModel
from inference.tasks import multi_vector
from inference.tasks.attention import attention_cap

ROLLOUT = AttentionQuery(aggregation="rollout")  # what an explanation costs, as /attention counts it


@dataclass(frozen=True)
class PairChunking:
    """Long documents cut into windows after the query; each document gets its best window's score."""

    mode: Literal["max"] = "max"
    overlap: int | None = None  # None: the model's default (`inference.rules.pair_overlap`)


async def rerank(
    model: ServedModel, query: str, documents: Sequence[str], *, truncate: bool | None = None,
    direction: Direction = "right", raw: bool = False, chunked: PairChunking | None = None, explain: bool = False,
) -> Ranking:
    """Each document's relevance to `query`, in document order (`Ranking.order` ranks them); a multi-vector
    model's is its MaxSim score (`inference.tasks.multi_vector`, raw has no meaning there)."""
    model.require("rerank")
    overlap = rules.pair_overlap(model.bundle.tokenizer, chunked.overlap) if chunked is not None else None
    if "multi_vectors" in model.multi_outputs:
        return await multi_vector.rerank(model, query, documents, truncate=truncate, direction=direction,
                                         explain=explain, overlap=overlap)
    if explain:
        model.require("attention", "explain a score (it has no attention graph)")
    if model.bundle.manifest.pair_format is not None and (explain or chunked is not None):
        raise Unsupported(f"model {model.name} writes each pair into its prompt (an LLM reranker): it cannot "
                          "explain a score or score a document's windows; long documents are cut to fit")
    pairs = [(query, document) for document in documents]
    if overlap is not None:
        return await _chunked(model, pairs, overlap, raw, explain)
    kinds = [PAIRS, ATTENTION] if explain else [PAIRS]
    check = attention_cap(model, ROLLOUT if explain else None)
    encoded, outputs = await model.run(pairs, kinds, truncate, direction, check=check)
    logits = postprocess.stacked(outputs[PAIRS], "logits")[:, 0]  # (N,)
    position = _pooled_position(model)
    explanations = await model.off_loop(_explained, encoded, outputs[ATTENTION], position) if explain else None
    return Ranking(_scores(logits, raw), sum(e.length for e in encoded), None, explanations)


def _pooled_position(model: ServedModel) -> int:
    """The position whose state is classified: the last token for a model that pools it, else the first."""
    return -1 if model.bundle.manifest.pooling == "lasttoken" else 0


async def score_pairs(
    model: ServedModel, pairs: Sequence[Pair | str], *, truncate: bool | None = None, direction: Direction = "right",
    function: postprocess.ScoreFunction | None = None,
) -> tuple[Scores, int]:
    """Scores over the model's labels per (text, text pair), or per text where an input is one (TEI's
    /predict batches mix them), and the tokens run; by `function`, or by default softmax over several labels
    and sigmoid of one (`postprocess.default_function`); a multi-vector model's pairs by MaxSim (one label,
    `score`; `function` has no meaning there)."""
    if "multi_vectors" in model.multi_outputs:
        return await _maxsim_pairs(model, pairs, truncate, direction)
    model.require("classify", "score text pairs")
    encoded, outputs = await model.run(list(pairs), [PAIRS], truncate, direction)
    scores = postprocess.scores(postprocess.stacked(outputs[PAIRS], "logits"), function)
    return Scores(scores, list(model.bundle.manifest.labels)), sum(e.length for e in encoded)


async def _maxsim_pairs(model: ServedModel, pairs: Sequence[Pair | str], truncate: bool | None,
                        direction: Direction) -> tuple[Scores, int]:
    """Each (query, document) pair's MaxSim score, as a one-label score."""
    if not all(isinstance(pair, tuple) for pair in pairs):
        raise Unsupported(f"model {model.name} scores (query, document) pairs by late interaction, not lone texts")
    scores, tokens = [], 0
    for query, documents in _by_query(pairs).items():  # type: ignore[arg-type]  # pairs only, checked above
        ranking = await multi_vector.rerank(model, query, [d for _, d in documents], truncate=truncate,
                                            direction=direction)
        scores += [(index, float(score)) for (index, _), score in zip(documents, ranking.scores, strict=True)]
        tokens += ranking.tokens
    values = np.asarray([[score] for _, score in sorted(scores)], dtype=np.float32)  # (N, 1) in pair order
    return Scores(values, ["score"]), tokens


def _by_query(pairs: Sequence[Pair]) -> dict[str, list[tuple[int, str]]]:
    """The pairs grouped by their query (first text), each document with its pair's index."""
    grouped: dict[str, list[tuple[int, str]]] = {}
    for index, (query, document) in enumerate(pairs):
        grouped.setdefault(query, []).append((index, document))
    return grouped


async def _chunked(model: ServedModel, pairs: list[Pair], overlap: int, raw: bool, explain: bool) -> Ranking:
    """Every window of every document scored; per document its best window (and, explained, that window's
    attention, run in the same admission)."""
    async def follow(ticket: Ticket, windows: list[list[Window]], grouped: list[list[Outputs]]) -> list[np.ndarray]:
        chosen = [ws[k] for ws, k in zip(windows, _best(grouped), strict=True)]
        maps = await model.submit(ticket, ATTENTION, [w.sequence for w in chosen])
        return [m["attentions"] for m in maps]

    windows, grouped, maps = await model.run_cut(
        pairs, overlap, PAIRS, chunking.cut_pairs, follow if explain else None,
        lambda ws: len(ws) if explain else 0,
    )
    best = _best(grouped)
    logits = np.asarray([outs[k]["logits"][0] for outs, k in zip(grouped, best, strict=True)])  # (N,)
    chosen = [ws[k] for ws, k in zip(windows, best, strict=True)]
    spans = [Span(w.start, w.stop, w.tokens) for w in chosen]
    explanations = None
    if maps is not None:
        encoded = [w.encoded for w in chosen]
        explanations = await model.off_loop(_explained, encoded, [{"attentions": m} for m in maps],
                                            _pooled_position(model))
    tokens = sum(w.length for ws in windows for w in ws)
    return Ranking(_scores(logits, raw), tokens, spans, explanations)


def _best(grouped: list[list[Outputs]]) -> list[int]:
    """Per document, the index of its highest-scoring window (the first of equals)."""
    return [int(np.argmax([o["logits"][0] for o in outs])) for outs in grouped]


def _scores(logits: np.ndarray, raw: bool) -> np.ndarray:
    return (logits if raw else postprocess.sigmoid(logits)).astype(np.float32)


def _explained(encoded: Sequence[Encoded | None], outputs: Sequence[Outputs], position: int) -> list[list[Highlight]]:
    """Runs in the executor: per pair, its document tokens' shares of the rollout from the classified position."""
    return [explanation(e, o["attentions"], position) for e, o in zip(encoded, outputs, strict=True) if e is not None]


def explanation(encoded: Encoded, attentions: np.ndarray, position: int = 0) -> list[Highlight]:
    """(L, H, n, n) maps of one pair -> its document tokens, each with the rollout's share of the attention
    that the classification position (the first, or -1: the last) draws from it, in token order."""
    flow = postprocess.rollout(attentions)[position]  # (n,) a row of the rollout: sums to 1 over the pair's tokens
    sequences = encoded.sequence_ids or []
    return [Highlight(a, b, float(flow[i])) for i, (s, (a, b)) in enumerate(zip(sequences, encoded.offsets,
                                                                              strict=True)) if s == 1]
