"""Hostile and broken input on every route that takes inputs: each case gets its one documented status
and the one error shape, is refused before any tokenising (a spy counts the tokenizer's calls) unless
refusing needs the token count, never runs the graph, and the error body echoes no more than 256 bytes
of what was sent.

    empty input list                    422 invalid_request
    more than ATTNSERVE_MAX_INPUTS      422 too_many_inputs
    non-string items / missing fields   422 validation_error
    malformed JSON / not UTF-8          422 validation_error
    wrong content type                  415 unsupported_media_type
    over max tokens, truncation off     422 input_too_long   (tokenised: the count needs the tokenizer)
    over max tokens, truncation on      200, cut to the model's max length
    over ATTNSERVE_MAX_INPUT_CHARS      422 input_too_long   (before tokenising)
    body over the payload limit         413 payload_too_large (while reading, before parsing; with or
                                        without Content-Length)
    lone surrogate escape "\\ud800"      422 validation_error
    NUL characters                      200 (valid Unicode; the tokenizer's normaliser drops them)
"""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from tests.helpers.fakes import Counting
from tests.helpers.serving import assert_error, graph_runs, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_INPUTS, MAX_CHARS, PAYLOAD = 8, 2_000, 4 * 1024 * 1024
FIELD = {"/embed": "inputs", "/classify": "inputs", "/attention": "inputs", "/tokenize": "inputs",
         "/v1/embeddings": "input", "/embed_all": "inputs", "/": "inputs"}
TRUNCATES = {"/embed", "/classify", "/attention", "/v1/embeddings", "/embed_all", "/"}  # /tokenize: every token
# Inputs shaped otherwise (TEI's [[text], ...] batches, a source sentence and others, token ids): their
# hostile input is covered by tests/service/test_tei_routes.py and the schema fuzzing.
SHAPED_OTHERWISE = {"/predict", "/similarity", "/decode"}
LONG = " ".join(["film"] * 200)  # 202 tokens > the tiny model's 64
RANDOM = "".join(random.Random(0).choices(string.ascii_letters, k=3_000_000))  # 3 MB: over max chars
JSON = {"content-type": "application/json"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_bundle: Path) -> AsyncIterator[tuple[Any, httpx.AsyncClient, Counting]]:
    overrides = dict(max_inputs=MAX_INPUTS, max_input_chars=MAX_CHARS, payload_limit_bytes=PAYLOAD, truncate=False)
    async with serving(tiny_bundle, **overrides) as (app, http):
        spy = Counting(app.state.models.default.bundle.tokenizer)
        app.state.models.default.bundle.tokenizer = spy
        yield app, http, spy


def body(route: str, value: Any, **extra: Any) -> bytes:
    return orjson.dumps({FIELD[route]: value, **extra})


def raw(route: str, value_json: str) -> bytes:
    """A body written by hand, for JSON that json/orjson would not write (escapes of lone surrogates)."""
    return f'{{"{FIELD[route]}": {value_json}}}'.encode()


# name -> (body for the route, content type, expected status, expected code)
Case = tuple[Callable[[str], bytes], str, int, str]
CASES: dict[str, Case] = {
    "empty_list": (lambda r: body(r, []), "application/json", 422, "validation_error"),
    "too_many_inputs": (lambda r: body(r, ["a"] * (MAX_INPUTS + 1)), "application/json", 422, "too_many_inputs"),
    "non_string_items": (lambda r: body(r, ["a", {"text": "b"}]), "application/json", 422, "validation_error"),
    "float_items": (lambda r: body(r, [1.5, 2.5]), "application/json", 422, "validation_error"),
    "null_item": (lambda r: body(r, [None]), "application/json", 422, "validation_error"),
    "missing_field": (lambda r: b"{}", "application/json", 422, "validation_error"),
    "not_an_object": (lambda r: b'["a"]', "application/json", 422, "validation_error"),
    "malformed_json": (lambda r: b'{"inputs": ["a",', "application/json", 422, "validation_error"),
    "not_utf8": (lambda r: b'{"inputs": "\xff\xfe"}', "application/json", 422, "validation_error"),
    "wrong_content_type": (lambda r: body(r, "a"), "text/plain", 415, "unsupported_media_type"),
    "form_content_type": (lambda r: b"inputs=a", "application/x-www-form-urlencoded", 415,
                          "unsupported_media_type"),
    "over_max_chars": (lambda r: body(r, "a" * (MAX_CHARS + 1)), "application/json", 422, "input_too_long"),
    "absurdly_long": (lambda r: body(r, RANDOM), "application/json", 422, "input_too_long"),
    "over_payload": (lambda r: body(r, RANDOM + RANDOM), "application/json", 413, "payload_too_large"),
    "lone_surrogate": (lambda r: raw(r, '["ok", "a\\ud800b"]'), "application/json", 422, "validation_error"),
    "lone_low_surrogate": (lambda r: raw(r, '"\\udfff"'), "application/json", 422, "validation_error"),
}


def assert_no_echo(response: httpx.Response, sent: bytes) -> None:
    """No 257-byte run of the request body appears in the error body."""
    text = response.content
    assert len(text) < 2048, text[:300]
    for start in range(max(0, len(text) - 256)):
        assert text[start: start + 257] not in sent, text


@pytest.mark.parametrize("route", sorted(FIELD))
@pytest.mark.parametrize("case", sorted(CASES))
async def test_refused_with_its_status_before_work(client, route: str, case: str) -> None:
    app, http, spy = client
    make, content_type, status, code = CASES[case]
    sent = make(route)
    calls, runs = spy.calls, graph_runs(app)
    response = await http.post(route, content=sent, headers={"content-type": content_type})
    assert_error(response, status, code)
    assert_no_echo(response, sent)
    assert spy.calls == calls, "refused only after tokenising"
    assert graph_runs(app) == runs, "refused only after running the graph"


@pytest.mark.parametrize("route", sorted(FIELD))
async def test_body_limit_holds_for_a_chunked_body_without_content_length(client, route: str) -> None:
    app, http, spy = client
    calls, chunk = spy.calls, b" " * (256 * 1024)

    async def chunks():  # whitespace is valid JSON padding: only the size can refuse it
        yield b'{"' + FIELD[route].encode() + b'": "a"'
        for _ in range(PAYLOAD // len(chunk) + 1):
            yield chunk
        yield b"}"

    response = await http.post(route, content=chunks(), headers=JSON)
    assert "content-length" not in response.request.headers
    assert_error(response, 413, "payload_too_large")
    assert spy.calls == calls


async def test_a_declared_oversize_body_is_refused_before_reading_it(client) -> None:
    app, _, _ = client
    reads, sent = 0, []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b" " * 1024, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(PAYLOAD + 1).encode())]
    scope = {"type": "http", "method": "POST", "path": "/embed", "raw_path": b"/embed", "query_string": b"",
             "headers": headers, "http_version": "1.1", "scheme": "http", "server": ("testserver", 80),
             "client": ("127.0.0.1", 1), "root_path": "", "asgi": {"version": "3.0"}}
    await app(scope, receive, send)
    assert sent[0]["status"] == 413 and reads == 0


@pytest.mark.parametrize("route", sorted(TRUNCATES))
async def test_too_long_with_truncation_off_is_422_after_counting_tokens(client, route: str) -> None:
    app, http, _ = client  # the app's default is truncate=false; /v1/embeddings has no per-request switch
    runs = graph_runs(app)
    extra = {} if route == "/v1/embeddings" else {"truncate": False}
    error = assert_error(await http.post(route, content=body(route, ["short", LONG], **extra), headers=JSON),
                         422, "input_too_long")
    assert "input 1" in error["message"] and "64" in error["message"]
    assert graph_runs(app) == runs


@pytest.mark.parametrize("route", sorted(TRUNCATES - {"/v1/embeddings"}))
async def test_too_long_with_truncation_on_is_cut(client, route: str) -> None:
    _, http, _ = client
    response = await http.post(route, content=body(route, LONG, truncate=True), headers=JSON)
    assert response.status_code == 200, response.text
    if route == "/attention":
        assert response.json()["data"][0]["shape"][-1] == 64


async def test_too_long_openai_with_server_truncation_on(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, truncate=True) as (_, http):
        response = await http.post("/v1/embeddings", json={"input": LONG})
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["prompt_tokens"] == 64


@pytest.mark.parametrize("route", sorted(FIELD))
async def test_nul_characters_are_valid_text(client, route: str) -> None:
    _, http, _ = client
    response = await http.post(route, content=body(route, ["a\x00b", "\x00" * 10, "film\u0000"]), headers=JSON)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    orjson.loads(response.content)


async def test_tokenize_returns_every_token_of_a_long_input(client) -> None:
    _, http, _ = client
    response = await http.post("/tokenize", json={"inputs": LONG})
    assert response.status_code == 200 and len(response.json()[0]) == 202


async def test_every_inputs_route_is_in_the_matrix(client) -> None:
    app, _, _ = client
    paths = app.openapi()["paths"].items()
    # /v2 takes tensors, not an inputs field: its matrix of bad requests is tests/service/test_v2.py's
    posts = {path for path, operations in paths if "post" in operations and not path.startswith("/v2")}
    assert posts == set(FIELD) | SHAPED_OTHERWISE, "a new route takes inputs: add it to FIELD"
