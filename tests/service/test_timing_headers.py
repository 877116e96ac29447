"""Per-request timing headers (x-total-time, x-tokenization-time, x-queue-time, x-inference-time), whole
milliseconds as text-embeddings-inference sends them: on every route that runs a model, each request with
its own figures, equal to what the server measured (its metrics), and none on answers no model touched.

Waits of known length are made by holding the graph (tests.helpers.fakes): a request queued behind a held
plug waits at least as long as the plug is held, and the plug's own graph run lasts at least as long.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from inference.scheduling.timing import RequestTiming
from service.app import create_app
from service.middleware import CACHED_HEADER, FINGERPRINT_HEADER, timing_headers
from service.middleware import TIMING_HEADERS as HEADERS
from service.settings import Settings
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.metrics import sample
from tests.helpers.serving import serving, until

HELD_MS = 60


def timings(response: httpx.Response) -> dict[str, int]:
    assert response.status_code == 200, response.text
    return {name: int(response.headers[name]) for name in HEADERS}


def test_headers_are_whole_milliseconds_and_only_once_a_model_was_used() -> None:
    record = RequestTiming()
    assert timing_headers(record) == []
    record.tokenized(0.0019)
    record.ran(0.0, 0.0125)
    record.ran(0.0031, 0.001)  # a second submit of the same request adds up
    values = dict(timing_headers(record))
    assert values[b"x-tokenization-time"] == b"1" and values[b"x-queue-time"] == b"3"
    assert values[b"x-inference-time"] == b"13" and int(values[b"x-total-time"]) >= 0


@pytest.mark.parametrize(("path", "body"), [
    ("/embed", {"inputs": ["a good film", "a dull one"]}),
    ("/v1/embeddings", {"input": "a good film"}),
    ("/v1/embeddings", {"input": [[2, 17, 3]]}),  # token ids: nothing to tokenise
    ("/classify", {"inputs": "a good film"}),
    ("/similarity", {"inputs": {"source_sentence": "a film", "sentences": ["a movie", "a cat"]}}),
    ("/embed", {"inputs": "a good film " * 40, "chunking": "mean", "chunk_overlap": 4}),
    ("/attention", {"inputs": "a good film"}),
    ("/v2/models/tiny/infer", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a film"]}]}),
])
async def test_routes_that_run_a_model_send_what_the_server_measured(tiny_bundle, path, body):
    """The headers are the seconds the server's metrics recorded for this request (the only one), in whole ms."""
    async with serving(tiny_bundle) as (app, client):
        before = _measured(app)
        started = time.perf_counter()
        values = timings(await client.post(path, json=body))
        elapsed_ms = (time.perf_counter() - started) * 1000
        after = _measured(app)
    tokenize, batches, inference = (after[k] - before[k] for k in ("tokenize", "batches", "inference"))
    assert values["x-tokenization-time"] == int(tokenize * 1000)
    assert batches >= 1
    if batches == 1:  # one graph run carried the whole request: its inference time is that run's
        assert values["x-inference-time"] == int(inference * 1000)
    else:  # the span from the first run's start to the last's end, within the runs' total
        assert values["x-inference-time"] <= int(inference * 1000) + 1
    # the stages follow one another inside the request, which the client saw whole
    parts = values["x-tokenization-time"] + values["x-queue-time"] + values["x-inference-time"]
    assert parts <= values["x-total-time"] <= elapsed_ms


def _measured(app) -> dict[str, float]:
    text = app.state.metrics.render().decode()
    return {"tokenize": sample(text, "attnserve_tokenize_duration_seconds_sum"),
            "batches": sample(text, "attnserve_inference_duration_seconds_count"),
            "inference": sample(text, "attnserve_inference_duration_seconds_sum")}


async def test_each_request_gets_its_own_queue_and_inference_time(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client):
        entered = time.monotonic()
        async with held(app, client) as plug:  # the plug's queue wait ended before this line
            plug_wait = time.monotonic() - entered
            queued = asyncio.create_task(client.post("/embed", json={"inputs": "queued behind the plug"}))
            await until(lambda: app.state.models.default.batcher.depth == 1)
            await asyncio.sleep(max(HELD_MS / 1000, plug_wait + 0.002))  # a wait of known length
        plug_times, queued_times = timings(await plug), timings(await queued)
    assert plug_times["x-inference-time"] >= HELD_MS  # its run waited at the gate
    assert queued_times["x-queue-time"] >= HELD_MS  # it waited in the queue meanwhile
    assert plug_times["x-queue-time"] < queued_times["x-queue-time"]  # one record per request


async def test_a_slow_graph_run_shows_as_inference_time(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client):
        app.state.models.default.bundle.fault = lambda: time.sleep(HELD_MS / 1000)  # in the graph thread
        values = timings(await client.post("/embed", json={"inputs": "slow"}))
    assert values["x-inference-time"] >= HELD_MS and values["x-total-time"] >= HELD_MS


async def test_no_timing_where_no_model_ran(tiny_bundle):
    async with serving(tiny_bundle, max_inputs=2) as (_, client):
        answers = [
            await client.get("/health"), await client.get("/info"),
            await client.post("/tokenize", json={"inputs": "not run"}),
            await client.post("/embed", json={"inputs": ["a", "b", "c"]}),  # 422 before any work
            await client.post("/embed", json={"normalize": True}),  # 422 validation
        ]
    for response in answers:
        assert not set(HEADERS) & set(response.headers), (response.request.url, response.status_code)


def test_openapi_documents_the_headers_on_every_route_that_runs_the_model():
    doc = create_app(Settings(bundle=Path("unused"))).openapi()
    queued = {path for path, item in doc["paths"].items() if "429" in item.get("post", {}).get("responses", {})}
    assert {"/embed", "/v1/embeddings", "/classify", "/attention", "/similarity"} <= queued
    answered = {*HEADERS, CACHED_HEADER, FINGERPRINT_HEADER}  # beside the timings: cache hits, the model build
    for path in queued:
        assert set(doc["paths"][path]["post"]["responses"]["200"]["headers"]) == answered, path
