"""In-process API tests of every documented error status, all in the one error shape."""

from __future__ import annotations

import asyncio

import orjson

import inference.errors
import service.errors
from service.errors import status_of
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import assert_error, graph_runs, serving, until

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
        runs = graph_runs(app)
        error = assert_error(await client.post("/attention", json={"inputs": "a warm and funny film " * 3}), 422,
                             "attention_too_large")
        assert "5000" in error["message"] and "ATTNSERVE_ATTENTION_CAP_BYTES" in error["message"]
        assert graph_runs(app) == runs
        ok = await client.post("/attention", json={"inputs": "dull", "aggregation": "rollout"})
        assert ok.status_code == 200


async def test_422_attention_graph_cap_counts_the_maps_asked_for(tiny_bundle):
    """The graph computes only the layers and heads asked for: with a cap of one 17-token map, one layer's head
    is answered, two layers' are refused before any run, with how to ask for less."""
    text = "a warm and funny film " * 3  # 20 tokens with [CLS] and [SEP]
    async with serving(tiny_bundle, attention_graph_cap_bytes=4 * 20 * 20) as (app, client):
        runs = graph_runs(app)
        error = assert_error(await client.post("/attention", json={"inputs": text, "layers": [0, 1], "heads": [0]}),
                             422, "attention_too_large")
        assert "ATTNSERVE_ATTENTION_GRAPH_CAP_BYTES" in error["message"] and graph_runs(app) == runs
        assert "fewer layers and heads" in error["message"]
        ok = await client.post("/attention", json={"inputs": text, "layers": [1], "heads": [0]})
        assert ok.status_code == 200 and graph_runs(app) == runs + 1
        assert len(ok.json()["data"][0]["tokens"]) == 20


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
    async with serving(tiny_bundle, wrap=GatedBundle.around, max_queue=5) as (app, client):
        batcher = app.state.models.default.batcher
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
    async with serving(tiny_bundle, wrap=GatedBundle.around, queue_timeout_s=0.2) as (app, client):
        batcher = app.state.models.default.batcher
        runs = graph_runs(app)
        async with held(app, client) as plug:
            assert_error(await client.post("/embed", json={"inputs": ["a", "b"]}), 504, "queue_timeout")
        assert (await plug).status_code == 200
        assert graph_runs(app) == runs + 1 and batcher.in_flight == 0  # only the plug ran


async def test_500_failing_batch_then_recovery(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client):
        runtime, batcher = app.state.models.default.bundle, app.state.models.default.batcher

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


async def test_unknown_error_is_a_generic_500(tiny_bundle, monkeypatch):
    from service.routes import ops

    def broken(served: object) -> dict:
        raise KeyError("/work/internal/path.py")

    monkeypatch.setattr(ops, "model_info", broken)
    async with serving(tiny_bundle) as (app, client):
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
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client), held(app, client) as plug:
        batcher = app.state.models.default.batcher
        runs = graph_runs(app)
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
    # runs are counted when they end: the plug's, which was running, is the only one
    assert graph_runs(app) == runs + 1 and batcher.in_flight == 0


def test_every_error_answers_the_status_its_module_documents():
    """service/errors.py documents the status of each error in a table; status_of must answer the same for
    every error class of the core and the edge."""
    documented: dict[str, int] = {}
    status = 0
    for line in service.errors.__doc__.splitlines():
        words = line.split()
        if words and words[0].isdigit():
            status, words = int(words[0]), words[2:]
        elif not line.startswith(" " * 30):  # not a continuation of the table's last row
            status = 0
        for word in words if status else []:
            name = word.strip(",():")
            if name[:1].isupper():
                documented.setdefault(name, status)
    classes = [c for module in (inference.errors, service.errors) for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, inference.errors.InferenceError)
               and not c.__name__.startswith("_")]
    assert len(classes) >= 20
    for cls in classes:
        if cls.__name__ in ("InferenceError", "StartupError"):
            continue  # the base (any other error: 500) and the load-time error (never a request's)
        error = cls("x") if cls is not inference.errors.Overloaded else cls("x", retry_after_s=1)
        assert cls.__name__ in documented, f"{cls.__name__} is not in service/errors.py's table"
        assert status_of(error)[0] == documented[cls.__name__], cls.__name__


# -- the OpenAPI document says what the server accepts (schema fuzzing with every check found these) --------
FIELD = {"/embed": "inputs", "/classify": "inputs", "/attention": "inputs", "/tokenize": "inputs",
         "/v1/embeddings": "input"}


def _request_schema(app, path: str) -> dict:
    doc = app.openapi()
    ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _arrays(schema: dict):
    """Every array schema nested in `schema`."""
    if schema.get("type") == "array":
        yield schema
        yield from _arrays(schema["items"])
    for branch in schema.get("anyOf", []):
        yield from _arrays(branch)


async def test_empty_lists_are_refused_and_documented_as_min_items_1(tiny_bundle):
    """And the attention's layers and heads, repeated: refused, documented as uniqueItems."""
    async with serving(tiny_bundle) as (app, client):
        for path, field in FIELD.items():
            arrays = list(_arrays(_request_schema(app, path)["properties"][field]))
            assert arrays and all(a["minItems"] == 1 for a in arrays), (path, arrays)
            assert_error(await client.post(path, json={field: []}), 422, "validation_error")
        assert_error(await client.post("/v1/embeddings", json={"input": [[]]}), 422, "validation_error")
        attention = _request_schema(app, "/attention")["properties"]
        for name in ("layers", "heads"):
            assert [a["minItems"] for a in _arrays(attention[name])] == [1]
            assert [a["uniqueItems"] for a in _arrays(attention[name])] == [True]
            assert_error(await client.post("/attention", json={"inputs": "x", name: []}), 422, "validation_error")
            error = assert_error(await client.post("/attention", json={"inputs": "x", name: [0, 1, 0]}), 422,
                                 "validation_error")  # a repeated map would be computed and held again
            assert "repeat" in error["message"], error


async def test_token_ids_are_json_integers_not_booleans_strings_or_fractions(tiny_bundle):
    async with serving(tiny_bundle) as (_, client):
        for ids in ([[False]], [True], [[1, True]], [[1, "2"]], [1.5], [[2, 2.5]], [-1], [[-1]]):
            assert_error(await client.post("/v1/embeddings", json={"input": ids}), 422, "validation_error")
        # OpenAPI 3.1 is JSON Schema 2020-12, where 1.0 *is* the integer 1: the document cannot refuse it,
        # so the server takes it as 1 (schemathesis' positive data sends such numbers).
        as_int = (await client.post("/v1/embeddings", json={"input": [[5, 7]]})).json()["data"]
        as_float = (await client.post("/v1/embeddings", json={"input": [[5.0, 7.0]]})).json()["data"]
        assert as_float == as_int


async def test_booleans_and_integers_are_strict_in_every_request_model(tiny_bundle):
    wrong = [
        ("/embed", {"normalize": 0}), ("/embed", {"normalize": "false"}), ("/embed", {"truncate": 1}),
        ("/embed", {"dimensions": True}), ("/embed", {"dimensions": "2"}), ("/embed", {"dimensions": 2.5}),
        ("/classify", {"raw_scores": 0}), ("/classify", {"top_k": True}), ("/classify", {"top_k": "1"}),
        ("/tokenize", {"add_special_tokens": "true"}), ("/tokenize", {"add_special_tokens": 1}),
        ("/attention", {"layers": [True]}), ("/attention", {"heads": ["0"]}), ("/attention", {"layers": [-1]}),
        ("/attention", {"truncate": "yes"}), ("/v1/embeddings", {"dimensions": False}),
    ]
    async with serving(tiny_bundle) as (_, client):
        for path, extra in wrong:
            error = assert_error(await client.post(path, json={FIELD[path]: "x", **extra}), 422, "validation_error")
            assert next(iter(extra)) in error["message"], (path, extra, error)
        assert (await client.post("/classify", json={"inputs": "x", "top_k": 1.0})).status_code == 200


async def test_past_the_models_sizes_is_out_of_range(tiny_bundle):
    """Valid for the document (which cannot know the bundle) but past the loaded model: 422 out_of_range."""
    async with serving(tiny_bundle) as (app, client):
        info = (await client.get("/info")).json()
        past = [
            ("/attention", {"inputs": "x", "layers": [info["num_layers"]]}),
            ("/attention", {"inputs": "x", "heads": [0, info["num_heads"]]}),
            ("/embed", {"inputs": "x", "dimensions": info["hidden_size"] + 1}),
            ("/v1/embeddings", {"input": "x", "dimensions": info["hidden_size"] + 1}),
            ("/v1/embeddings", {"input": [app.state.models.default.bundle.tokenizer.vocab_size]}),
        ]
        for path, body in past:
            assert_error(await client.post(path, json=body), 422, "out_of_range")


def test_documented_statuses_and_bounds_are_json_schema():
    """Every POST route documents 408 (body timeout) and 500 (the generic error); bounds are `minimum`,
    never a pydantic keyword (`ge`) that JSON Schema ignores."""
    from pathlib import Path

    from service.app import create_app
    from service.settings import Settings

    doc = create_app(Settings(bundle=Path("unused"))).openapi()
    for path in FIELD:
        assert {"408", "413", "415", "422", "500"} <= set(doc["paths"][path]["post"]["responses"]), path
    text = orjson.dumps(doc["components"]).decode()
    assert '"ge":' not in text and '"le":' not in text and '"minimum":' in text


async def test_405_allow_names_every_method_of_the_path(tiny_bundle):
    """"/" has a GET route (the index) and a POST route (TEI's root): Allow lists both, not the first route's."""
    async with serving(tiny_bundle) as (_, client):
        response = await client.request("DELETE", "/")
        assert_error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == "GET, POST"
        assert (await client.request("PUT", "/embed")).headers["allow"] == "POST"
