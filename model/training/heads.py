"""Training the other heads: a cross-encoder on (query, text, label) pairs (`--task rerank`) and a token
classifier on texts with labelled character spans (`--task tokens`). Both fine-tune the whole encoder
(model.training.loop.fit), with the checkpoint, metrics.json and progress of the classifier.

    rerank  JSONL {query, text, label}; label > 0 is relevant (graded labels count as gains). A one-label
            pooler head (as BERT cross-encoders), binary cross-entropy on the logit; queries are split whole
            between training and held-out, and each held-out query's texts are ranked by score:
            MRR@10 and NDCG@10, averaged over queries with a relevant text.
    tokens  JSONL {text, spans: [{start, end, label}]}; a token inside a span gets B-label (its first token)
            or I-label, others O; cross-entropy over content tokens; entity-level precision, recall and
            F1 (exact type and token extent, as seqeval's default mode) on held-out texts.

Shape letters: B batch, T sequence, C labels.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor

from model.tokenizer import pad_batch, truncating
from model.training.data import DataError
from model.training.loop import Split, Task, TextTask

IGNORE = -100  # labels of special tokens and padding: no loss


@dataclass(frozen=True)
class Pairs:
    queries: list[str]
    texts: list[str]
    labels: list[float]


@dataclass(frozen=True)
class Spans:
    texts: list[str]
    spans: list[list[tuple[int, int, str]]]

    @property
    def label_names(self) -> tuple[str, ...]:
        kinds = sorted({label for spans in self.spans for _, _, label in spans})
        return ("O", *(f"{p}-{k}" for k in kinds for p in ("B", "I")))


def pairs_from_rows(rows: Sequence[dict[str, Any]], source: str) -> Pairs:
    for number, row in enumerate(rows, start=1):
        if not {"query", "text", "label"} <= set(row):
            raise DataError(f"{source}: row {number} needs query, text and label (has {', '.join(sorted(row))})")
    return Pairs([str(r["query"]) for r in rows], [str(r["text"]) for r in rows], [float(r["label"]) for r in rows])


def spans_from_rows(rows: Sequence[dict[str, Any]], source: str) -> Spans:
    texts, spans = [], []
    for number, row in enumerate(rows, start=1):
        if "text" not in row or not isinstance(row.get("spans", []), list):
            raise DataError(f"{source}: row {number} needs text and a list of spans")
        texts.append(str(row["text"]))
        spans.append([(int(s["start"]), int(s["end"]), str(s["label"])) for s in row.get("spans", [])])
    return Spans(texts, spans)


def split_pairs(data: Pairs, val_fraction: float, seed: int) -> tuple[Pairs, Pairs]:
    """Whole queries held out: no held-out query is seen in training."""
    queries = sorted(set(data.queries))
    random.Random(seed).shuffle(queries)
    held = set(queries[: max(1, round(len(queries) * val_fraction))])
    parts = ([i for i, q in enumerate(data.queries) if q not in held],
             [i for i, q in enumerate(data.queries) if q in held])
    return tuple(Pairs(*[[getattr(data, f)[i] for i in part] for f in ("queries", "texts", "labels")])
                 for part in parts)  # type: ignore[return-value]


def split_spans(data: Spans, val_fraction: float, seed: int) -> tuple[Spans, Spans]:
    order = list(range(len(data.texts)))
    random.Random(seed).shuffle(order)
    cut = max(1, round(len(order) * val_fraction))
    held, train = sorted(order[:cut]), sorted(order[cut:])
    return (Spans([data.texts[i] for i in train], [data.spans[i] for i in train]),
            Spans([data.texts[i] for i in held], [data.spans[i] for i in held]))


# -- rerank --------------------------------------------------------------------------------------
def pair_split(tokenizer: Tokenizer, data: Pairs, max_length: int) -> Split:
    encodings = truncating(tokenizer, max_length).encode_batch(list(zip(data.queries, data.texts, strict=True)))
    return Split([(e.ids, e.type_ids) for e in encodings], list(data.labels))


class PairTask(Task):
    """The whole encoder on (query, text) pairs with their token types; one logit per pair."""

    def __init__(self, module: torch.nn.Module, train: Split, val: Split, batch_size: int, device: torch.device,
                 pad: int, groups: list[str]) -> None:
        super().__init__(module, train, val, batch_size, device)
        self.pad, self.groups = pad, groups  # groups: each held-out pair's query

    def collate(self, examples: Sequence[tuple[list[int], list[int]]]) -> tuple[Tensor, Tensor]:
        ids, mask = pad_batch([e[0] for e in examples], self.pad)  # (B, T) each
        types, _ = pad_batch([e[1] for e in examples], 0)  # (B, T)
        return torch.stack([ids, types], dim=-1), mask  # (B, T, 2)

    def logits(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        pairs, mask = inputs
        return self.module(pairs[..., 0], mask, pairs[..., 1]).logits  # type: ignore[no-any-return]  # (B, 1)

    def collate_labels(self, labels: Sequence[Any]) -> Tensor:
        return torch.tensor(labels, dtype=torch.float32)  # (B,) relevance

    def loss(self, logits: Tensor, labels: Tensor, reduction: str = "mean") -> Tensor:
        return F.binary_cross_entropy_with_logits(logits[:, 0], (labels > 0).float(), reduction=reduction)

    @torch.no_grad()
    def evaluate(self, label_names: Sequence[str]) -> dict[str, Any]:
        self.module.eval()
        scores = [0.0] * len(self.val.labels)
        total = 0.0
        for (inputs, labels), indices in zip(self.batches(self.val, None), _order(self), strict=True):
            logits = self.logits(inputs)
            total += self.loss(logits, labels, "sum").item()
            for i, value in zip(indices, logits[:, 0].tolist(), strict=True):
                scores[i] = value
        return {"val_loss": total / len(scores), **ranking_report(self.groups, scores, self.val.labels)}


def _order(task: Task) -> list[list[int]]:
    from model.training.data import batch_order

    return batch_order(task.val.lengths, task.batch_size, False, random.Random())


def ranking_report(groups: Sequence[str], scores: Sequence[float], labels: Sequence[float],
                   k: int = 10) -> dict[str, float]:
    """MRR@k and NDCG@k averaged over the groups (queries) with a relevant item."""
    by_group: dict[str, list[tuple[float, float]]] = {}
    for group, score, label in zip(groups, scores, labels, strict=True):
        by_group.setdefault(group, []).append((score, label))
    mrr, ndcg = [], []
    for items in by_group.values():
        gains = [label for _, label in sorted(items, key=lambda item: -item[0])]
        if max(gains) <= 0:
            continue
        mrr.append(next((1 / (r + 1) for r, g in enumerate(gains[:k]) if g > 0), 0.0))
        ndcg.append(_dcg(gains[:k]) / _dcg(sorted(gains, reverse=True)[:k]))
    if not mrr:
        raise DataError("no held-out query has a relevant text: MRR and NDCG are undefined")
    return {f"mrr@{k}": sum(mrr) / len(mrr), f"ndcg@{k}": sum(ndcg) / len(ndcg), "queries": float(len(mrr))}


def _dcg(gains: Sequence[float]) -> float:
    return sum((2 ** g - 1) / math.log2(rank + 2) for rank, g in enumerate(gains))


# -- tokens --------------------------------------------------------------------------------------
def token_split(tokenizer: Tokenizer, data: Spans, label_names: Sequence[str], max_length: int) -> Split:
    """Token ids per text and a label per token: B-/I- inside a span, O outside, IGNORE on special tokens."""
    index = {name: i for i, name in enumerate(label_names)}
    encodings = truncating(tokenizer, max_length).encode_batch(data.texts)
    labels = [_bio(e, spans, index) for e, spans in zip(encodings, data.spans, strict=True)]
    return Split([e.ids for e in encodings], labels)


def _bio(encoding: Any, spans: list[tuple[int, int, str]], index: dict[str, int]) -> list[int]:
    labels, open_span = [], None
    for special, (a, b) in zip(encoding.special_tokens_mask, encoding.offsets, strict=True):
        if special:
            labels.append(IGNORE)
            continue
        inside = next((s for s in spans if s[0] <= a and b <= s[1] and a < b), None)
        labels.append(index["O"] if inside is None else index[f"{'I' if inside is open_span else 'B'}-{inside[2]}"])
        open_span = inside
    return labels


class TokenTask(TextTask):
    """The whole encoder with a token head, fed as TextTask feeds it; a label per token (logits (B, T, C))."""

    def collate_labels(self, labels: Sequence[Any]) -> Tensor:
        longest = max(len(row) for row in labels)
        return torch.tensor([row + [IGNORE] * (longest - len(row)) for row in labels], dtype=torch.long)  # (B, T)

    def loss(self, logits: Tensor, labels: Tensor, reduction: str = "mean") -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction=reduction)

    @torch.no_grad()
    def evaluate(self, label_names: Sequence[str]) -> dict[str, Any]:
        self.module.eval()
        gold, found, total, count = set(), set(), 0.0, 0
        for (inputs, labels), indices in zip(self.batches(self.val, None), _order(self), strict=True):
            logits = self.logits(inputs)
            total += self.loss(logits, labels, "sum").item()
            count += int((labels != IGNORE).sum())
            for row, i in enumerate(indices):
                keep = labels[row] != IGNORE
                gold |= {(i, *e) for e in entities(labels[row][keep].tolist(), label_names)}
                found |= {(i, *e) for e in entities(logits[row].argmax(-1)[keep].tolist(), label_names)}
        return {"val_loss": total / max(count, 1), **entity_report(gold, found)}


def entities(tags: Sequence[int], label_names: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first token, last token) of each entity in a BIO sequence; an I- without its B- starts one."""
    found: list[tuple[str, int, int]] = []
    for position, tag in enumerate(tags):
        name = label_names[tag]
        kind = name[2:] if name[:2] in ("B-", "I-") else None
        if kind is not None and name[0] == "I" and found and found[-1][0] == kind and found[-1][2] == position - 1:
            found[-1] = (kind, found[-1][1], position)
        elif kind is not None:
            found.append((kind, position, position))
    return found


def entity_report(gold: set[Any], found: set[Any]) -> dict[str, float]:
    hits = len(gold & found)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(gold) if gold else 0.0
    f1 = 2 * hits / (len(gold) + len(found)) if gold or found else 0.0
    return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1, "entities": float(len(gold))}
