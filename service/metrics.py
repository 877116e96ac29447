"""Prometheus metrics, one registry per app (so several apps in one process never collide).

Every series carries a `model` label: the served model's name (`for_model` gives each served model and
batcher a view that writes its own), or "" on requests that reached no model (/health, unknown paths); and a
`caller` label: the name of the caller whose key the request carried (never the key), "" when no key is
configured or the path needs none, and "" on the series of shared work (a batch carries several callers'
inputs; the cache's size is the models')."""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from inference.scheduling.observer import BatchObserver

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)


class Metrics(BatchObserver):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.model = ""  # the `model` label this view writes (see for_model)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}  # (series, label values) -> child; views share it
        r = self.registry
        self.requests = Counter(
            "attnserve_requests", "HTTP requests by route and status", ["route", "status", "model", "caller"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "attnserve_request_duration_seconds", "HTTP request duration", ["route", "model", "caller"],
            buckets=_SECONDS, registry=r,
        )
        self.depth = Gauge("attnserve_queue_depth", "Inputs waiting in the batch queue", ["model", "caller"],
                           registry=r)
        self.batch_size = Histogram(
            "attnserve_batch_size", "Inputs per graph run", ["model", "caller"], buckets=_SIZES, registry=r,
        )
        self.inputs_in_flight = Gauge(
            "attnserve_inputs_in_flight", "Inputs admitted whose graph run has not finished (tokenising, queued "
            "or running); at most max_queue per model: the load signal to autoscale on", ["model", "caller"],
            registry=r,
        )
        self.batch_tokens = Histogram(
            "attnserve_batch_tokens", "Real tokens per graph run", ["model", "caller"], buckets=_TOKENS, registry=r,
        )
        self.padded_tokens = Histogram(
            "attnserve_batch_padded_tokens", "Tokens per graph run counting padding", ["model", "caller"],
            buckets=_TOKENS, registry=r,
        )
        self.tokenize_seconds = Histogram(
            "attnserve_tokenize_duration_seconds", "Tokenisation time per request", ["model", "caller"],
            buckets=_SECONDS, registry=r,
        )
        self.queue_seconds = Histogram(
            "attnserve_queue_duration_seconds", "Time an input waited in the queue", ["model", "caller"],
            buckets=_SECONDS, registry=r,
        )
        self.inference_seconds = Histogram(
            "attnserve_inference_duration_seconds", "Graph run time per batch", ["kind", "model", "caller"],
            buckets=_SECONDS, registry=r,
        )
        self.model_runs = Counter(
            "attnserve_model_runs", "Graph runs by kind and outcome", ["kind", "outcome", "model", "caller"],
            registry=r,
        )
        self.runs_at_once = Counter(
            "attnserve_inputs_run_at_once", "Inputs of requests that found the batcher idle (nothing queued, a run "
            "slot free) and ran at once, without passing through the batch queue", ["model", "caller"], registry=r,
        )
        self.cache_hits = Counter(
            "attnserve_cache_hits", "Inputs answered without a run of their own: from the answer cache, as a repeat "
            "within their request, or by another request's run of the same input",
            ["model", "caller"], registry=r,
        )
        self.cache_misses = Counter(
            "attnserve_cache_misses", "Inputs not in the answer cache (each run once)", ["model", "caller"],
            registry=r,
        )
        self.cache_evictions = Counter(
            "attnserve_cache_evictions", "Answer cache entries evicted (least recently used) to stay in its bytes",
            ["model", "caller"], registry=r,
        )
        self.cache_bytes = Gauge(
            "attnserve_cache_bytes", "Bytes held by the answer cache (shared by the models)", ["model", "caller"],
            registry=r,
        )
        self.keys_reloads = Counter(
            "attnserve_api_keys_reloads", "Reads of the API keys file, by outcome (ok: now in force; error: it did "
            "not parse and the previous keys stay)", ["outcome", "model", "caller"], registry=r,
        )
        self.keys = Gauge("attnserve_api_keys", "Callers whose keys are in force", ["model", "caller"], registry=r)

    def for_model(self, name: str) -> Metrics:
        """A view onto the same series that writes `model=name` (one per served model's engine and batcher)."""
        view = copy.copy(self)
        view.model = name
        return view

    def request(self, route: str, status: int, seconds: float, model: str = "", caller: str = "") -> None:
        self._at(self.requests, route, str(status), model, caller).inc()
        self._at(self.request_seconds, route, model, caller).observe(seconds)

    def tokenized(self, caller: str, seconds: float) -> None:
        self._at(self.tokenize_seconds, self.model, caller).observe(seconds)

    def queue_depth(self, caller: str, depth: int) -> None:
        self._at(self.depth, self.model, caller).set(depth)

    def in_flight(self, caller: str, inputs: int) -> None:
        self._at(self.inputs_in_flight, self.model, caller).set(inputs)

    def queue_waits(self, caller: str, seconds: list[float]) -> None:
        histogram = self._at(self.queue_seconds, self.model, caller)  # looked up once for a batch's inputs
        for one in seconds:
            histogram.observe(one)

    def ran_at_once(self, caller: str, inputs: int) -> None:
        self._at(self.runs_at_once, self.model, caller).inc(inputs)

    def batch(self, graph: str, size: int, tokens: int, padded_tokens: int) -> None:
        self._at(self.batch_size, self.model, "").observe(size)
        self._at(self.batch_tokens, self.model, "").observe(tokens)
        self._at(self.padded_tokens, self.model, "").observe(padded_tokens)

    def inference(self, graph: str, seconds: float, ok: bool) -> None:
        self._at(self.inference_seconds, graph, self.model, "").observe(seconds)
        self._at(self.model_runs, graph, "ok" if ok else "error", self.model, "").inc()

    def cache(self, caller: str, hits: int, misses: int) -> None:
        self._at(self.cache_hits, self.model, caller).inc(hits)
        self._at(self.cache_misses, self.model, caller).inc(misses)

    def cache_size(self, entries_bytes: int, evictions: int) -> None:
        self._at(self.cache_bytes, "", "").set(entries_bytes)
        self._at(self.cache_evictions, self.model, "").inc(evictions)

    def keys_read(self, ok: bool, callers: int) -> None:
        self._at(self.keys_reloads, "ok" if ok else "error", "", "").inc()
        self._at(self.keys, "", "").set(callers)

    def _at(self, series: Any, *labels: str) -> Any:
        """`series.labels(*labels)`, looked up once: prometheus_client validates the values and takes a lock on
        every call, about 2 us, and a lone request makes a dozen (service/metrics.py's hooks)."""
        key = (id(series), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = series.labels(*labels)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)
