"""In-process API tests of every documented error status, all in the one error shape."""

from __future__ import annotations

import asyncio

import orjson

from service.errors import InvalidRequest
from tests.helpers.fakes import GatedRuntime, held
from tests.helpers.serving import assert_error, serving, until

KEY = "s3cret-key"


async def test_401_on_every_route_but_health_ready_metrics(tiny_bundle):
    async with serving(tiny_bundle, api_key=KEY) as (_, client):
        for path in ("/embed", "/classify", "/attention", "/tokenize", "/v1/embeddings"):
            assert_error(await client.post(path, json={"inputs": "x", "input": "x"}), 401, "invalid_api_key")
        assert_error(await client.get("/info"), 401)
        wrong = await client.get("/info", headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401)
        assert wrong.headers["www-authenticate"] == "Bearer"
        ok = await client.post("/embed", json={"inputs": "x"}, headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200
        for path in ("/health", "/ready", "/metrics"):
            assert (await client.get(path)).status_code == 200


async def test_404_405_415_and_422_validation(tiny_bundle):
    async with serving(tiny_bundle) as (_, client):
        assert_error(await client.get("/nowhere"), 404, "not_found")
        not_allowed = await client.get("/embed")
        assert_error(not_allowed, 405, "method_not_allowed")
        assert "POST" in not_allowed.headers["allow"]
        assert_error(await client.post("/embed", content=b"inputs=x"), 415, "unsupported_media_type")
        bad_json = await client.post("/embed", content=b"{nope", headers={"content-type": "application/json"})
        assert_error(bad_json, 422, "validation_error")
        missing = assert_error(await client.post("/embed", json={"normalize": True}), 422, "validation_error")
        assert "inputs" in missing["message"]
        assert_error(await client.post("/attention", json={"inputs": "x", "aggregation": "sum"}), 422)
        assert_error(await client.post("/attention", json={"inputs": "x", "layers": [5]}), 422, "out_of_range")
        assert_error(await client.post("/embed", json={"inputs": []}), 422, "validation_error")
        assert_error(await client.post("/v1/embeddings", json={"input": [[99999]]}), 422, "out_of_range")
        assert_error(await client.post("/v1/embeddings", json={"input": "x", "dimensions": 999}), 422)


async def test_422_limits_name_the_limit(tiny_bundle):
    async with serving(tiny_bundle, max_inputs=3, max_input_chars=50, truncate=False) as (_, client):
        many = assert_error(await client.post("/embed", json={"inputs": ["a"] * 4}), 422, "too_many_inputs")
        assert "ATTNSERVE_MAX_INPUTS" in many["message"]
        chars = assert_error(await client.post("/embed", json={"inputs": "a" * 51}), 422, "input_too_long")
        assert "50" in chars["message"]
        tokens = " ".join(["a"] * 24)  # 47 characters, 26 tokens: within max_length 64
        assert (await client.post("/embed", json={"inputs": tokens})).status_code == 200
    async with serving(tiny_bundle, truncate=False) as (_, client):
        long_text = " ".join(["a"] * 100)  # 102 tokens > max_length 64
        too_long = assert_error(await client.post("/embed", json={"inputs": long_text}), 422, "input_too_long")
        assert "64" in too_long["message"]
        cut = await client.post("/embed", json={"inputs": long_text, "truncate": True})
        assert cut.status_code == 200


async def test_422_attention_cap_refused_before_compute(tiny_bundle):
    async with serving(tiny_bundle, attention_cap_bytes=5_000) as (app, client):
        runs = app.state.engine.batcher.runs
        error = assert_error(await client.post("/attention", json={"inputs": "a warm and funny film " * 3}), 422,
                             "attention_too_large")
        assert "5000" in error["message"] and "ATTNSERVE_ATTENTION_CAP_BYTES" in error["message"]
        assert app.state.engine.batcher.runs == runs
        ok = await client.post("/attention", json={"inputs": "dull", "aggregation": "rollout"})
        assert ok.status_code == 200


async def test_413_with_content_length_and_chunked(tiny_bundle):
    async with serving(tiny_bundle, payload_limit_bytes=1000) as (_, client):
        body = orjson.dumps({"inputs": "a " * 1000})
        assert_error(await client.post("/embed", content=body, headers={"content-type": "application/json"}),
                     413, "payload_too_large")

        async def chunks():
            for _ in range(10):
                yield b" " * 200

        chunked = await client.post("/embed", content=chunks(), headers={"content-type": "application/json"})
        assert_error(chunked, 413, "payload_too_large")


async def test_429_at_once_when_admission_is_full(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedRuntime.around, max_queue=5) as (app, client):
        batcher = app.state.engine.batcher
        async with held(app, client) as plug:  # the plug holds 1 of the 5 permits
            waiting = asyncio.create_task(client.post("/embed", json={"inputs": ["a", "b", "c"]}))
            await until(lambda: batcher.depth == 3)
            refused = await client.post("/embed", json={"inputs": ["d", "e"]})  # 4 + 2 > 5: all-or-nothing
            assert_error(refused, 429, "overloaded")
            assert int(refused.headers["retry-after"]) >= 1
            fits = asyncio.create_task(client.post("/embed", json={"inputs": ["f"]}))  # 4 + 1 <= 5
            await until(lambda: batcher.depth == 4)
        assert (await plug).status_code == (await waiting).status_code == (await fits).status_code == 200


async def test_504_past_queue_timeout_and_not_run(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedRuntime.around, queue_timeout_s=0.2) as (app, client):
        batcher = app.state.engine.batcher
        runs = batcher.runs
        async with held(app, client) as plug:
            assert_error(await client.post("/embed", json={"inputs": ["a", "b"]}), 504, "queue_timeout")
        assert (await plug).status_code == 200
        assert batcher.runs == runs + 1 and batcher.in_flight == 0  # only the plug ran


async def test_500_failing_batch_then_recovery(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedRuntime.around) as (app, client):
        runtime, batcher = app.state.engine.runtime, app.state.engine.batcher

        def fault() -> None:
            raise RuntimeError("CUDA error at /opt/secret/kernel.cu")

        async with held(app, client) as plug:
            runtime.fault = fault
            tasks = [asyncio.create_task(client.post("/embed", json={"inputs": t})) for t in ("a", "b", "c")]
            await until(lambda: batcher.depth == 3)
        for response in await asyncio.gather(plug, *tasks):
            error = assert_error(response, 500, "inference_failed")
            assert "secret" not in error["message"]
        assert_error(await client.get("/ready"), 503, "not_ready")
        runtime.fault = None
        assert (await client.post("/embed", json={"inputs": "a"})).status_code == 200
        assert (await client.get("/ready")).status_code == 200


async def test_unknown_error_is_a_generic_500(tiny_bundle):
    async with serving(tiny_bundle) as (app, client):
        def broken() -> dict:
            raise KeyError("/work/internal/path.py")

        app.state.engine.info = broken
        error = assert_error(await client.get("/info"), 500, "internal_error")
        assert error["message"] == "internal server error"


async def test_request_id_is_echoed_or_made(tiny_bundle):
    async with serving(tiny_bundle) as (_, client):
        given = await client.get("/health", headers={"X-Request-ID": "abc-123"})
        assert given.headers["x-request-id"] == "abc-123"
        made = await client.get("/health", headers={"X-Request-ID": "bad id\n"[:6]})
        assert made.headers["x-request-id"] != "bad id"


async def test_cors_only_when_configured(tiny_bundle):
    preflight = {"Origin": "http://ui.example", "Access-Control-Request-Method": "POST"}
    async with serving(tiny_bundle) as (_, client):
        response = await client.options("/embed", headers=preflight)
        assert "access-control-allow-origin" not in response.headers
    async with serving(tiny_bundle, cors_origins="http://ui.example") as (_, client):
        response = await client.options("/embed", headers=preflight)
        assert response.headers["access-control-allow-origin"] == "http://ui.example"


async def test_disconnected_client_is_dropped_before_compute(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedRuntime.around) as (app, client), held(app, client) as plug:
        batcher = app.state.engine.batcher
        runs = batcher.runs
        messages = [{"type": "http.request", "body": b'{"inputs": ["a", "b"]}', "more_body": False}]
        queued = asyncio.Event()

        async def receive():
            if messages:
                return messages.pop(0)
            while batcher.depth < 2:
                await asyncio.sleep(0.005)
            queued.set()
            return {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/embed", "raw_path": b"/embed", "query_string": b"",
                 "headers": [(b"content-type", b"application/json")], "http_version": "1.1", "scheme": "http",
                 "server": ("testserver", 80), "client": ("127.0.0.1", 1), "root_path": "", "asgi": {"version": "3.0"}}
        await app(scope, receive, send)
        assert queued.is_set() and batcher.depth == 0 and batcher.in_flight == 1  # the plug's permit
    assert (await plug).status_code == 200
    assert batcher.runs == runs and batcher.in_flight == 0  # the plug was already running: nothing else ran


def test_domain_errors_carry_their_status():
    assert InvalidRequest("x").status == 422
