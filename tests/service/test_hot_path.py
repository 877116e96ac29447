"""The hot routes' short path (service.hot) answers exactly what the FastAPI routes answer: the same status,
body bytes and headers for the same request, valid or not, with one model served and with two. The app
without the short path is the same app built with no hot routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.routes import openai, rerank, tei
from tests.helpers.serving import serving

JSON = {"content-type": "application/json"}
LONG = " ".join(["a warm and funny film"] * 40)  # past the tiny model's 64 tokens
REQUESTS: list[tuple[str, Any, dict[str, str]]] = [
    ("/embed", {"inputs": "a warm and funny film"}, JSON),
    ("/embed", {"inputs": ["dull", "an instant classic"], "normalize": False, "dimensions": 8}, JSON),
    ("/embed", {"inputs": LONG, "chunking": "windows", "chunk_overlap": 4}, JSON),
    ("/embed", {"inputs": LONG, "truncate": False}, JSON),  # 422 from the core, after the short path took it
    ("/embed", {"inputs": LONG, "truncate": True, "truncation_direction": "left"}, JSON),
    ("/embed", {"inputs": []}, JSON),
    ("/embed", {"inputs": "x", "normalize": "yes"}, JSON),
    ("/embed", {"inputs": "x", "prompt_name": "nope"}, JSON),
    ("/embed", {"inputs": ["x"] * 1000}, JSON),
    ("/embed", {"inputs": "x", "unknown": 1}, JSON),
    ("/embed", b'{"inputs": "x"', JSON),  # not JSON
    ("/embed", b"", JSON),
    ("/embed", {"inputs": "x"}, {"content-type": "text/plain"}),
    ("/embed", {"inputs": "x"}, {"content-type": "application/vnd.api+json"}),
    ("/embed?model=nope", {"inputs": "x"}, JSON),
    ("/embed?model=b", {"inputs": "x", "model": "a"}, JSON),
    ("/embed?model=b", {"inputs": "x"}, JSON),
    ("/embed?model=", {"inputs": "x"}, JSON),
    ("/embed?model=a&model=b", {"inputs": "x"}, JSON),
    ("/classify", {"inputs": ["a warm and funny film", "dull"]}, JSON),
    ("/classify", {"inputs": "dull", "top_k": 1, "raw_scores": True}, JSON),
    ("/classify", {"inputs": LONG, "chunking": "windows"}, JSON),
    ("/classify", {"inputs": "dull", "model": "b"}, JSON),  # b has no classifier head: the core's 422
    ("/classify", {"inputs": "dull", "top_k": 0}, JSON),
    ("/v1/embeddings", {"input": "a warm and funny film", "model": "a"}, JSON),
    ("/v1/embeddings", {"input": ["dull", "fine"], "encoding_format": "base64", "user": "u"}, JSON),
    ("/v1/embeddings", {"input": [3, 4, 5], "dimensions": 4}, JSON),
    ("/v1/embeddings", {"input": [[3, 4], [5]]}, JSON),
    ("/v1/embeddings", {"input": [10**9]}, JSON),  # a token id past the vocabulary
    ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, JSON),
    ("/v1/embeddings?model=b", {"input": "x"}, JSON),  # the OpenAI route takes no ?model=
]
RERANK: list[tuple[str, Any, dict[str, str]]] = [
    ("/rerank", {"query": "a warm film", "texts": ["dull", "a warm and funny film"], "model": "ce"}, JSON),
    ("/rerank", {"query": "a film", "texts": [LONG, "dull"], "chunking": "max", "explain": True, "return_text": True,
                 "model": "ce"}, JSON),
    ("/rerank", {"query": "a film", "texts": ["dull"], "raw_scores": True, "model": "ce"}, JSON),
    ("/rerank", {"query": "a film", "texts": [], "model": "ce"}, JSON),
    ("/rerank", {"query": "a film", "texts": ["dull"], "chunk_overlap": 10_000, "model": "ce"}, JSON),
    ("/rerank?model=ce", {"query": "a film", "texts": ["dull"]}, JSON),
    ("/rerank", {"query": "a film", "texts": ["dull"]}, JSON),  # the default model is no cross-encoder: 422
    ("/rerank", {"query": "a film", "texts": ["dull"], "model": "nope"}, JSON),
]
VARYING = {"x-request-id", "x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time"}


@asynccontextmanager
async def both(bundles: list[Path | str], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two apps on the same bundles: with the short path, and with no route on it."""
    async with AsyncExitStack() as stack:
        _, short = await stack.enter_async_context(serving(bundles))
        with monkeypatch.context() as patch:
            for module in (tei, openai, rerank):
                patch.setattr(module, "HOT", ())
            _, full = await stack.enter_async_context(serving(bundles))
        yield [short, full]


def request(path: str, body: Any, headers: dict[str, str]) -> dict[str, Any]:
    return {"url": path, "headers": headers, **({"content": body} if isinstance(body, bytes) else {"json": body})}


@pytest.mark.parametrize("served", ["one", "two", "cross-encoder"])
async def test_the_short_path_answers_byte_for_byte_what_the_routes_answer(
    served, tiny_bundle, tiny_plain_bundle, head_bundles, monkeypatch,
):
    bundles: list[Path | str] = {
        "one": [tiny_bundle], "two": [f"a={tiny_bundle}", f"b={tiny_plain_bundle}"],
        "cross-encoder": [f"a={tiny_bundle}", f"ce={head_bundles['bert-ce'].bundle}"],
    }[served]
    async with both(bundles, monkeypatch) as (short, full):
        statuses = set()
        for path, body, headers in REQUESTS if served != "cross-encoder" else RERANK:
            got, expected = [await client.post(**request(path, body, headers)) for client in (short, full)]
            assert (got.status_code, got.content) == (expected.status_code, expected.content), (path, body)
            assert {k: v for k, v in got.headers.items() if k not in VARYING} == \
                {k: v for k, v in expected.headers.items() if k not in VARYING}, (path, body)
            statuses.add(got.status_code)
        refusals = {"one": {415, 422}, "two": {404, 415, 422}, "cross-encoder": {404, 422}}[served]
        assert {200} | refusals <= statuses  # the list reaches answers and refusals of every kind


async def test_the_metrics_label_a_short_path_request_with_its_route(tiny_bundle):
    async with serving(tiny_bundle) as (_, client):
        assert (await client.post("/embed", json={"inputs": "x"})).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert 'route="/embed"' in metrics and 'route="unmatched"' not in metrics


async def test_a_valid_request_takes_the_short_path_and_a_refused_one_the_routes(tiny_bundle, monkeypatch):
    """The FastAPI route looks its answer up by name at each call, the short path holds its own: a counting
    stand-in under that name sees only what the FastAPI routes answered."""
    routed = []
    original = tei.embed_answer

    async def counting(*args: Any) -> Any:
        routed.append(args[0])
        return await original(*args)

    monkeypatch.setattr(tei, "embed_answer", counting)
    async with serving(tiny_bundle) as (_, client):
        assert (await client.post("/embed", json={"inputs": "fine"})).status_code == 200
        assert (await client.post("/embed", json={"inputs": "fine", "normalize": "yes"})).status_code == 422
        assert routed == []  # the 200 came from the short path; the 422 from FastAPI's, before any answer ran
    monkeypatch.setattr(tei, "HOT", ())  # an app built without the short path: its /embed is FastAPI's
    async with serving(tiny_bundle) as (_, client):
        assert (await client.post("/embed", json={"inputs": "fine"})).status_code == 200
        assert len(routed) == 1
