"""Token classification (NER, PII): a token classifier's labels per token, or grouped into entities, answered
as transformers' token-classification pipeline answers (`entity` or `entity_group`, `score`, `word`, `start`,
`end` in characters of the input), with its aggregation strategies: none, simple, first, average, max.

Every text is cut into windows (`inference.chunking.cut`, keeping each window's tokens), so a text of any
length is labelled; a text of at most one window is exactly the pipeline's single pass. A token seen by
several windows takes its scores from the window where it sits most centrally (farthest from a cut edge;
the text's own start and end are no cut), so every token is labelled with context on both sides.

Shape letters: K windows of one text, n tokens of one window, C labels.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from inference import chunking, postprocess, rules
from inference.chunking import Window
from inference.results import Entity
from inference.runtime.graphs import TOKEN_LOGITS, Outputs
from inference.runtime.tokenize import TextTokenizer
from inference.served import ServedModel

Aggregation = Literal["none", "simple", "first", "average", "max"]
IGNORED = ("O",)  # the pipeline's default ignore_labels


@dataclass(frozen=True)
class TokenScores:
    """One content token of a text with its label scores (the pipeline's "pre-entity")."""

    word: str
    scores: np.ndarray  # (C,) softmax over the labels
    start: int
    end: int
    index: int  # position in the text's own encoding (special tokens counted)
    is_subword: bool


async def classify_tokens(
    model: ServedModel, texts: Sequence[str], *, aggregation: Aggregation = "none",
    overlap: int | None = None,
) -> list[list[Entity]]:
    """Per text, its labelled tokens (none) or entities (the other strategies), "O" left out; windows share
    `overlap` tokens (None: the model's default, `inference.rules.token_overlap`)."""
    model.require("tokens", "label tokens (it is not a token classifier)")
    overlap = rules.token_overlap(model.bundle.tokenizer, overlap)
    cut = functools.partial(chunking.cut, keep_tokens=True)
    windows, grouped, _ = await model.run_cut(list(texts), overlap, TOKEN_LOGITS, cut)
    labels = list(model.bundle.manifest.labels)
    return await model.off_loop(_label_all, model.bundle.tokenizer, list(texts), windows, grouped, labels,
                                aggregation, overlap)


def _label_all(tokenizer: TextTokenizer, texts: list[str], windows: list[list[Window]],
               outputs: list[list[Outputs]], labels: list[str], aggregation: Aggregation,
               overlap: int) -> list[list[Entity]]:
    """Runs in the executor: per text, its tokens' scores merged over windows, then aggregated."""
    return [label(tokenizer, text, token_scores(tokenizer, text, ws, outs, overlap), labels, aggregation)
            for text, ws, outs in zip(texts, windows, outputs, strict=True)]


def token_scores(tokenizer: TextTokenizer, text: str, windows: list[Window], outputs: list[Outputs],
                 overlap: int) -> list[TokenScores]:
    """Every content token of `text` in order, scored by the window where it sits most centrally (window k
    starts at content token k (W - overlap), W the first window's size)."""
    step = windows[0].tokens - overlap
    chosen: dict[int, tuple[float, Window, int, np.ndarray]] = {}  # content position -> (centrality, ...)
    for k, (window, out) in enumerate(zip(windows, outputs, strict=True)):
        content = _content(window)
        for local, position in enumerate(content):
            left = local if k > 0 else np.inf
            right = len(content) - 1 - local if k < len(windows) - 1 else np.inf
            centrality = float(min(left, right))
            here = k * step + local
            if here not in chosen or centrality > chosen[here][0]:
                chosen[here] = (centrality, window, position, out["token_logits"][position])
    lead = _content(windows[0])[0] if _content(windows[0]) else 0  # special tokens before the content
    return [_scored(tokenizer, text, w, p, logits, lead + here) for here, (_, w, p, logits) in sorted(chosen.items())]


def _content(window: Window) -> list[int]:
    assert window.encoded is not None and window.encoded.sequence_ids is not None  # cut(keep_tokens=True)
    return [i for i, s in enumerate(window.encoded.sequence_ids) if s == 0]


def _scored(tokenizer: TextTokenizer, text: str, window: Window, position: int, logits: np.ndarray,
            index: int) -> TokenScores:
    """A pre-entity as the pipeline gathers it: the token's text, and whether it continues a word."""
    e = window.encoded
    assert e is not None
    start, end = e.offsets[position]
    word, reference = e.tokens[position], text[start:end]
    if tokenizer.subword_prefix:  # a word-aware tokenizer: a continuation is longer than its text
        is_subword = len(word) != len(reference)
    else:  # the pipeline's fallback heuristic: no space before the token
        is_subword = start > 0 and " " not in text[start - 1:start + 1]
    if int(e.ids[position]) == tokenizer.unk_id:
        word, is_subword = reference, False
    scores = postprocess.softmax(logits.astype(np.float32)[None])[0]  # (C,)
    return TokenScores(word, scores, start, end, index, is_subword)


def label(tokenizer: TextTokenizer, text: str, tokens: list[TokenScores], labels: list[str],
          aggregation: Aggregation) -> list[Entity]:
    """The pipeline's aggregate, group_entities and ignore_labels on one text's scored tokens."""
    if aggregation in ("none", "simple"):
        entities = [_entity(t, labels) for t in tokens]
    else:
        entities = [_word(tokenizer, group, labels, aggregation) for group in _words(tokens)]
    if aggregation != "none":
        entities = [_grouped(tokenizer, g) for g in _groups(entities)]
    return [e for e in entities if e.label not in IGNORED]


def _entity(token: TokenScores, labels: list[str]) -> Entity:
    best = int(token.scores.argmax())
    return Entity(labels[best], float(token.scores[best]), token.word, token.start, token.end, token.index)


def _words(tokens: list[TokenScores]) -> list[list[TokenScores]]:
    """Tokens grouped into words: a subword joins the word before it."""
    words: list[list[TokenScores]] = []
    for token in tokens:
        if words and token.is_subword:
            words[-1].append(token)
        else:
            words.append([token])
    return words


def _word(tokenizer: TextTokenizer, tokens: list[TokenScores], labels: list[str], how: Aggregation) -> Entity:
    """One word's label: its first token's, its most confident token's, or its tokens' mean scores'."""
    if how == "first":
        scores = tokens[0].scores
    elif how == "max":
        scores = max(tokens, key=lambda t: float(t.scores.max())).scores
    else:
        scores = np.nanmean(np.stack([t.scores for t in tokens]), axis=0)  # (C,)
    best = int(scores.argmax())
    word = tokenizer.tokens_to_text([t.word for t in tokens])
    return Entity(labels[best], float(scores[best]), word, tokens[0].start, tokens[-1].end)


def _tag(label: str) -> tuple[str, str]:
    """("B" or "I", entity type): labels outside the B-/I- scheme continue ("I")."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def _groups(entities: list[Entity]) -> list[list[Entity]]:
    """Adjacent entities of one type, a B- label starting a new group."""
    groups: list[list[Entity]] = []
    for entity in entities:
        bi, tag = _tag(entity.label)
        if groups and tag == _tag(groups[-1][-1].label)[1] and bi != "B":
            groups[-1].append(entity)
        else:
            groups.append([entity])
    return groups


def _grouped(tokenizer: TextTokenizer, entities: list[Entity]) -> Entity:
    group = entities[0].label.split("-", 1)[-1]
    score = float(np.nanmean([e.score for e in entities]))
    word = tokenizer.tokens_to_text([e.word for e in entities])
    return Entity(group, score, word, entities[0].start, entities[-1].end)
