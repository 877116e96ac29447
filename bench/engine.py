"""Engine bench: the bundle's fast graph in raw onnxruntime sessions, in-process, no HTTP.

Sessions are opened with the server's own options (bundle.session.open_session) and run the way the
server runs them (inference.options.LoadOptions, read from the environment as `attnserve serve` reads it:
`graph_runs` batches at once, `session_threads()` intra-op threads each). That is the "service"
configuration; the others spend the same cores differently: one batch at a time on all of them, or one
batch per core on one thread each. A ratio's reference is the fastest of them at its shape, so the
service is compared with the best the bare graph does on this machine, not with its own choice.

Each point runs one warm-up and then as many rounds as fit in `seconds` (at least `min_runs`); in each
round every run slot runs the batch once. Figures: texts/s over the whole measurement, the median time
of one run, and this process's CPU time per text (what the graph costs, which other jobs on a shared
machine disturb far less than wall time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench.texts import make_texts
from bundle.feeds import INPUT_NAMES, input_names, pad
from bundle.session import cpu_cores, open_session
from inference.options import LoadOptions, from_environment


@dataclass(frozen=True)
class Config:
    runs: int  # batches in flight at once
    threads: int  # intra-op threads of each run

    @property
    def label(self) -> str:
        return f"{self.runs}x{self.threads}t"


def service_config() -> Config:
    """How `attnserve serve` started from this environment runs the graph on CPU: its load options read from
    the ATTNSERVE_* variables, and the function the server sizes its sessions with."""
    options = from_environment(LoadOptions)
    return Config(options.graph_runs, options.session_threads())


@dataclass(frozen=True)
class EnginePoint:
    variant: str
    batch: int
    length: int  # tokens per text, [CLS]/[SEP] included, after clipping to max_length
    tokenize: bool  # tokenising (and padding into numpy) included in the timed region
    config: str  # runs in flight x threads each
    runs: int
    median_s: float  # one run
    texts_per_s: float
    tokens_per_s: float
    cpu_ms_per_text: float


def encode(tokenizer: Tokenizer, texts: list[str], pad_id: int = 0,
           names: Sequence[str] = INPUT_NAMES) -> dict[str, np.ndarray]:
    """Tokenise and right-pad to the longest text of the batch, as the service does: (B, T) int64 ids and mask,
    and the token type ids (all 0) when the graph takes them (`names`: bundle.feeds.input_names)."""
    return pad([e.ids for e in tokenizer.encode_batch(texts)], pad_id, names)


class EngineBench:
    """Measures (batch, length) points of one graph; caches points so ratios can reuse them."""

    def __init__(self, variant: str, graph: Path, tokenizer: Tokenizer, seconds: float, min_runs: int = 2,
                 service: Config | None = None) -> None:
        self.variant, self.tokenizer, self.seconds, self.min_runs = variant, tokenizer, seconds, min_runs
        self.service = service or Config(1, cpu_cores())
        self.configs = list(dict.fromkeys([self.service, Config(1, cpu_cores()), Config(cpu_cores(), 1)]))
        self._sessions = {t: open_session(graph, "cpu", t) for t in {c.threads for c in self.configs}}
        self.cache: dict[tuple[int, int, bool, Config], EnginePoint] = {}
        self.names = input_names(self.session)  # the feeds the graph takes

    @property
    def session(self) -> Any:
        """The session opened as the service opens it (its threads per run)."""
        return self._sessions[self.service.threads]

    def point(self, batch: int, length: int, tokenize: bool = False, config: Config | None = None) -> EnginePoint:
        """The point at the service's configuration unless `config` says otherwise."""
        key = (batch, length, tokenize, config or self.service)
        if key not in self.cache:
            self.cache[key] = self._measure(*key)
        return self.cache[key]

    def reference(self, batch: int, length: int) -> EnginePoint:
        """The fastest configuration at this shape (texts/s): the ceiling a served figure is compared with."""
        return max((self.point(batch, length, config=c) for c in self.configs), key=lambda p: p.texts_per_s)

    def latency(self, length: int) -> EnginePoint:
        """One text at a time, one run in flight: the lowest median time of a batch-1 run over the thread
        counts the configurations use (what one request at a time could at best take in the graph)."""
        return min((self.point(1, length, config=Config(1, c.threads)) for c in self.configs),
                   key=lambda p: p.median_s)

    def _measure(self, batch: int, length: int, tokenize: bool, config: Config) -> EnginePoint:
        texts = make_texts(self.tokenizer, length, batch, seed=length)
        feed = encode(self.tokenizer, texts, names=self.names)
        session = self._sessions[config.threads]
        self._run(session, texts, feed, tokenize)  # warm-up: allocator and kernel choice for this shape
        times, wall, cpu = self._rounds(session, texts, feed, tokenize, config.runs)
        real_tokens = int(feed["attention_mask"].sum()) * len(times)
        done = batch * len(times)
        return EnginePoint(self.variant, batch, feed["input_ids"].shape[1], tokenize, config.label, len(times),
                           float(np.median(times)), done / wall, real_tokens / wall, 1000 * cpu / done)

    def _rounds(self, session: Any, texts: list[str], feed: dict[str, np.ndarray], tokenize: bool,
                runs: int) -> tuple[list[float], float, float]:
        """(each run's seconds, wall seconds, CPU seconds): `runs` threads each running the batch in a loop."""
        times: list[float] = []
        deadline = time.perf_counter() + self.seconds

        def loop() -> None:
            while len(times) < self.min_runs * runs or time.perf_counter() < deadline:
                start = time.perf_counter()
                self._run(session, texts, feed, tokenize)
                times.append(time.perf_counter() - start)

        wall, cpu = time.perf_counter(), time.process_time()
        threads = [threading.Thread(target=loop) for _ in range(runs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return times, time.perf_counter() - wall, time.process_time() - cpu

    def _run(self, session: Any, texts: list[str], feed: dict[str, np.ndarray], tokenize: bool) -> None:
        if tokenize:
            feed = encode(self.tokenizer, texts, names=self.names)
        session.run(["embeddings"], feed)
