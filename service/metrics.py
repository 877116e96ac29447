"""Prometheus metrics, one registry per app (so several apps in one process never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from service.batcher import BatchObserver

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)


class Metrics(BatchObserver):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "attnserve_requests", "HTTP requests by route and status", ["route", "status"], registry=r,
        )
        self.request_seconds = Histogram(
            "attnserve_request_duration_seconds", "HTTP request duration", ["route"], buckets=_SECONDS, registry=r,
        )
        self.depth = Gauge("attnserve_queue_depth", "Inputs waiting in the batch queue", registry=r)
        self.inputs_in_flight = Gauge(
            "attnserve_inputs_in_flight", "Inputs admitted whose graph run has not finished (tokenising, queued "
            "or running); at most max_queue: the load signal to autoscale on", registry=r,
        )
        self.batch_size = Histogram("attnserve_batch_size", "Inputs per graph run", buckets=_SIZES, registry=r)
        self.batch_tokens = Histogram(
            "attnserve_batch_tokens", "Real tokens per graph run", buckets=_TOKENS, registry=r,
        )
        self.padded_tokens = Histogram(
            "attnserve_batch_padded_tokens", "Tokens per graph run counting padding", buckets=_TOKENS, registry=r,
        )
        self.tokenize_seconds = Histogram(
            "attnserve_tokenize_duration_seconds", "Tokenisation time per request", buckets=_SECONDS, registry=r,
        )
        self.queue_seconds = Histogram(
            "attnserve_queue_duration_seconds", "Time an input waited in the queue", buckets=_SECONDS, registry=r,
        )
        self.inference_seconds = Histogram(
            "attnserve_inference_duration_seconds", "Graph run time per batch", ["kind"], buckets=_SECONDS, registry=r,
        )
        self.model_runs = Counter(
            "attnserve_model_runs", "Graph runs by kind and outcome", ["kind", "outcome"], registry=r,
        )

    def request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.request_seconds.labels(route).observe(seconds)

    def tokenized(self, seconds: float) -> None:
        self.tokenize_seconds.observe(seconds)

    def queue_depth(self, depth: int) -> None:
        self.depth.set(depth)

    def in_flight(self, inputs: int) -> None:
        self.inputs_in_flight.set(inputs)

    def queue_wait(self, seconds: float) -> None:
        self.queue_seconds.observe(seconds)

    def batch(self, kind: str, size: int, tokens: int, padded_tokens: int) -> None:
        self.batch_size.observe(size)
        self.batch_tokens.observe(tokens)
        self.padded_tokens.observe(padded_tokens)

    def inference(self, kind: str, seconds: float, ok: bool) -> None:
        self.inference_seconds.labels(kind).observe(seconds)
        self.model_runs.labels(kind, "ok" if ok else "error").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
