"""Engine bench: the bundle's fast graph in a raw onnxruntime session, in-process, no HTTP.

Session options follow the service's (intra-op threads = cores, ORT_ENABLE_ALL, no spinning). Each point runs
one warm-up and then as many runs as fit in `seconds` (at least `min_runs`); figures are medians.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from bench.texts import make_texts


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


def make_session(path: Path, threads: int = 0) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # the service's default
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def encode(tokenizer: Tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """Pad to the longest text of the batch: (B, T) int64 ids and mask."""
    encodings = tokenizer.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(texts), width), dtype=np.int64)  # (B, T)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask}


class EngineBench:
    """Measures (batch, length) points on one session; caches points so ratios can reuse them."""

    def __init__(self, variant: str, graph: Path, tokenizer: Tokenizer, seconds: float, min_runs: int = 2):
        self.variant, self.tokenizer = variant, tokenizer
        self.session = make_session(graph)
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
