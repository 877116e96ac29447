"""Deterministic benchmark texts of a requested token count, checked with the bundle's tokenizer."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from tokenizers import Tokenizer

from bundle.manifest import Manifest
from inference.runtime import tokenize

# Common English words, each one word piece in BERT vocabularies, so token counts move in steps of one.
_WORD_LIST = (
    "the of and to in is was for on that with as by at from his her they this had not are but "
    "have which one were all their there been has when who will more would if out so up said what "
    "about into than them can only other new some could time these two may then first any like now "
    "my such make over our even most me state after also made many did must before back see through "
    "way where get much go well your know should down work year because come people just say each "
    "those take day good how long little own man being under never same another know while last "
    "might great old off come since against go came right used three small place found house world "
    "film movie story great funny good bad plot actor music scene end best love life young family"
)
WORDS = tuple(_WORD_LIST.split())


def load_tokenizer(bundle: Path, manifest: Manifest | None = None) -> Tokenizer:
    """The bundle's tokenizer as the server loads it (inference.runtime.tokenize.load_tokenizer), cutting at its max
    length and never padding."""
    return tokenize.load_tokenizer(bundle, manifest or Manifest.read(bundle)).truncating


def make_text(tokenizer: Tokenizer, tokens: int, seed: int) -> str:
    """A text whose encoding (with [CLS]/[SEP]) is as close to `tokens` long as the word list allows."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(tokens)]
    count = max(1, tokens - 2)
    while count > 1 and _count(tokenizer, words[:count]) > tokens:
        count -= 1
    return " ".join(words[:count])


def make_texts(tokenizer: Tokenizer, tokens: int, n: int, seed: int = 0) -> list[str]:
    return [make_text(tokenizer, tokens, seed * 100_003 + i) for i in range(n)]


def make_documents(tokenizer: Tokenizer, tokens: int, n: int, seed: int = 0) -> list[str]:
    """Documents of about `tokens` tokens each, longer than the max length: texts of the max length joined."""
    per = max(8, (tokenizer.truncation or {}).get("max_length", 512))
    parts = -(-tokens // (per - 2))  # each part's [CLS] and [SEP] are not in the joined document
    full = whole(tokenizer)
    return [" ".join(make_texts(full, per, parts, seed * 100_003 + i)) for i in range(n)]


@functools.lru_cache(maxsize=4)
def whole(tokenizer: Tokenizer) -> Tokenizer:
    """A copy that does not truncate, to count tokens past the max length (made once per tokenizer: a copy
    serialises and parses the whole vocabulary, and the bench counts tokens for every request body)."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    return copy


def token_counts(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """Whole token counts, past the tokenizer's max length too."""
    return [len(e.ids) for e in whole(tokenizer).encode_batch(texts)]


def _count(tokenizer: Tokenizer, words: list[str]) -> int:
    return len(tokenizer.encode(" ".join(words)).ids)
