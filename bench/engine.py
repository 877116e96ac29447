"""Engine bench: the bundle's fast graph in a raw onnxruntime session, in-process, no HTTP.

The session is opened with the service's own options (bundle.session.open_session). Each point runs
one warm-up and then as many runs as fit in `seconds` (at least `min_runs`); figures are medians.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from bench.texts import make_texts
from bundle.feeds import pad
from bundle.session import open_session


@dataclass(frozen=True)
class EnginePoint:
    variant: str
    batch: int
    length: int  # tokens per text, [CLS]/[SEP] included, after clipping to max_length
    tokenize: bool  # tokenising (and padding into numpy) included in the timed region
    runs: int
    median_s: float
    texts_per_s: float
    tokens_per_s: float


def encode(tokenizer: Tokenizer, texts: list[str], pad_id: int = 0) -> dict[str, np.ndarray]:
    """Tokenise and right-pad to the longest text of the batch, as the service does: (B, T) int64 ids and mask."""
    return pad([e.ids for e in tokenizer.encode_batch(texts)], pad_id)


class EngineBench:
    """Measures (batch, length) points on one session; caches points so ratios can reuse them."""

    def __init__(self, variant: str, graph: Path, tokenizer: Tokenizer, seconds: float, min_runs: int = 2):
        self.variant, self.tokenizer = variant, tokenizer
        self.session = open_session(graph)
        self.seconds, self.min_runs = seconds, min_runs
        self.cache: dict[tuple[int, int, bool], EnginePoint] = {}

    def point(self, batch: int, length: int, tokenize: bool = False) -> EnginePoint:
        key = (batch, length, tokenize)
        if key not in self.cache:
            self.cache[key] = self._measure(batch, length, tokenize)
        return self.cache[key]

    def _measure(self, batch: int, length: int, tokenize: bool) -> EnginePoint:
        texts = make_texts(self.tokenizer, length, batch, seed=length)
        feed = encode(self.tokenizer, texts)
        real_tokens = int(feed["attention_mask"].sum())
        if (batch, length, not tokenize) not in self.cache:
            self._run(texts, feed, tokenize)  # warm-up: allocator and kernel selection for this shape
        times = self._repeat(texts, feed, tokenize)
        median = float(np.median(times))
        return EnginePoint(self.variant, batch, feed["input_ids"].shape[1], tokenize, len(times), median,
                           batch / median, real_tokens / median)

    def _repeat(self, texts: list[str], feed: dict[str, np.ndarray], tokenize: bool) -> list[float]:
        times: list[float] = []
        deadline = time.perf_counter() + self.seconds
        while len(times) < self.min_runs or time.perf_counter() < deadline:
            start = time.perf_counter()
            self._run(texts, feed, tokenize)
            times.append(time.perf_counter() - start)
        return times

    def _run(self, texts: list[str], feed: dict[str, np.ndarray], tokenize: bool) -> None:
        if tokenize:
            feed = encode(self.tokenizer, texts)
        self.session.run(["embeddings"], feed)
