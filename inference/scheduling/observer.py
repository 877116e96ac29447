"""What the core reports as it works, for metrics: the hooks a caller (the HTTP front's Prometheus registry)
overrides; the defaults do nothing. `caller` is a caller's name ("" for none), `graph` a batch's graph kind."""

from __future__ import annotations


class BatchObserver:
    """Hooks for metrics."""

    def tokenized(self, caller: str, seconds: float) -> None: ...
    def queue_depth(self, caller: str, depth: int) -> None: ...  # the caller's inputs waiting, after a change
    def in_flight(self, caller: str, inputs: int) -> None: ...  # its admitted inputs (queued, tokenising, running)
    def queue_waits(self, caller: str, seconds: list[float]) -> None: ...  # each of its inputs' wait, a batch's
    def ran_at_once(self, caller: str, inputs: int) -> None: ...  # a request found the batcher idle: never queued
    def cache(self, caller: str, hits: int, misses: int) -> None: ...
    def cache_size(self, entries_bytes: int, evictions: int) -> None: ...
    def batch(self, graph: str, size: int, tokens: int, padded_tokens: int) -> None: ...
    def inference(self, graph: str, seconds: float, ok: bool) -> None: ...
