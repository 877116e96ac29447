"""The load scenarios (a)-(i) and their payloads, identical for attnserve and the naive server.

  a  32 callers x 1 text of ~16 tokens    (does the batcher form batches from concurrent singles?)
  b   4 callers x 32 texts of ~128 tokens (throughput on client-side batches)
  c   4 callers x 8 texts of ~500 tokens  (long inputs, clipped to the bundle's max_length)
  d   1 caller  x 1 text of ~16 tokens    (sequential single-request latency)
  e   1 caller  x 1 text of 128 tokens on /attention (all layers and heads, base64 float16);
  e-embed: the same text on the embedding route, for the (e) ratio.
  g   4 callers x 1 document of ~5,000 tokens, chunked ("chunking": "mean": windows of the max length, one
      pooled vector per document; the naive server does not chunk, so g is the service's alone).
  h   2 callers x 8 texts of 512 tokens   (a decoder's client batches: make bench-decoder's Qwen3-0.6B shape)
  i   1 caller  x 1 text of 64 tokens     (a decoder's lone requests)
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import orjson
from tokenizers import Tokenizer

from bench.httpload import LoadResult, Payload, run_load
from bench.texts import make_documents, make_texts, token_counts


@dataclass(frozen=True)
class Scenario:
    name: str
    workers: int
    texts: int
    length: int
    route: str = "embed"  # embed | attention
    chunking: str | None = None  # the request's "chunking" (length is then the whole document's tokens)

    @property
    def naive(self) -> bool:
        """Whether the naive server can answer it (it does not chunk)."""
        return self.chunking is None


SCENARIOS = {
    "a": Scenario("a", 32, 1, 16),
    "b": Scenario("b", 4, 32, 128),
    "c": Scenario("c", 4, 8, 500),
    "d": Scenario("d", 1, 1, 16),
    "e": Scenario("e", 1, 1, 128, route="attention"),
    "e-embed": Scenario("e-embed", 1, 1, 128),
    "g": Scenario("g", 4, 1, 5000, chunking="mean"),
    "h": Scenario("h", 2, 8, 512),
    "i": Scenario("i", 1, 1, 64),
}
ROUTES = {"embed": "/embed", "openai": "/v1/embeddings", "attention": "/attention"}


def payloads(scenario: Scenario, tokenizer: Tokenizer, embed_route: str, pool: int = 64,
             max_length: int | None = None) -> list[Payload]:
    """`pool` distinct request bodies (one fixed text for e / e-embed, so both see the same input; 8 documents
    for a chunked scenario, each a few seconds of graph time). Texts of a scenario that does not chunk are made at
    most `max_length` tokens long: each server runs what was sent, whatever length it would truncate at (Infinity
    cuts all-MiniLM-L6-v2 at its 512 positions, sentence-transformers and attnserve at 256)."""
    count = 1 if scenario.name.startswith("e") else 8 if scenario.chunking else pool
    make = make_documents if scenario.chunking else make_texts
    length = scenario.length if scenario.chunking or max_length is None else min(scenario.length, max_length)
    out = []
    for i in range(count):
        texts = make(tokenizer, length, scenario.texts, seed=1000 * scenario.length + i)
        out.append(Payload(_body(scenario, texts, embed_route), len(texts), sum(token_counts(tokenizer, texts))))
    return out


def _body(scenario: Scenario, texts: list[str], embed_route: str) -> bytes:
    if scenario.route == "attention":
        return orjson.dumps({"inputs": texts[0], "encoding": "base64", "dtype": "float16"})
    chunking = {"chunking": scenario.chunking} if scenario.chunking else {}
    if embed_route == "openai":
        return orjson.dumps({"input": texts, "model": "bench", **chunking})
    return orjson.dumps({"inputs": texts, **chunking})


def path_of(scenario: Scenario, embed_route: str) -> str:
    return ROUTES["attention"] if scenario.route == "attention" else ROUTES[embed_route]


def check_once(url: str, scenario: Scenario, payload: Payload, embed_route: str) -> str | None:
    """One request, its answer checked (count of vectors / attention shape); None when it looks right."""
    response = httpx.post(url + path_of(scenario, embed_route), content=payload.body,
                          headers={"content-type": "application/json"}, timeout=120.0)
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    body = response.json()
    if scenario.route == "attention":
        return None if body.get("data") and body["data"][0].get("shape") else f"no attention data: {str(body)[:200]}"
    got = len(body["data"]) if isinstance(body, dict) else len(body)
    return None if got == payload.texts else f"{got} vectors for {payload.texts} texts"


def warm_up(port: int, scenario: Scenario, bodies: list[Payload], embed_route: str, seconds: float) -> None:
    if seconds > 0:
        asyncio.run(run_load(port, path_of(scenario, embed_route), bodies, scenario.workers, seconds))


def run(port: int, scenario: Scenario, bodies: list[Payload], embed_route: str, duration_s: float,
        server_cpu: Callable[[], float] | None = None) -> LoadResult:
    return asyncio.run(run_load(port, path_of(scenario, embed_route), bodies, scenario.workers, duration_s,
                                server_cpu))


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def histograms(metrics_text: str) -> dict[str, list[float]]:
    """{histogram name: [sum, count]} from Prometheus text, summed over label sets."""
    found: dict[str, list[float]] = {}
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if not match or not match[1].endswith(("_sum", "_count")):
            continue
        name, _, suffix = match[1].rpartition("_")
        found.setdefault(name, [0.0, 0.0])[suffix == "count"] += float(match[3])
    return found


def read_histograms(url: str) -> dict[str, list[float]]:
    try:
        response = httpx.get(url + "/metrics", timeout=10.0)
    except httpx.TransportError:
        return {}
    return histograms(response.text) if response.status_code == 200 else {}


def histogram_deltas(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict[str, list[float]]:
    """[sum, count] of each histogram over the interval between two snapshots, where it observed anything."""
    deltas = {}
    for name, (total, count) in after.items():
        old_total, old_count = before.get(name, [0.0, 0.0])
        if count > old_count:
            deltas[name] = [total - old_total, count - old_count]
    return deltas


def histogram_means(deltas: dict[str, list[float]]) -> dict[str, float]:
    """Mean of each histogram over an interval (e.g. attnserve_batch_size), from histogram_deltas."""
    return {name: total / count for name, (total, count) in deltas.items()}


def graph_tokens(deltas: dict[str, list[float]]) -> tuple[float, float] | None:
    """(real tokens, tokens counting padding) the graph ran over an interval: what a chunked document
    really cost (its windows overlap), and the padding waste, their ratio."""
    real, padded = deltas.get("attnserve_batch_tokens"), deltas.get("attnserve_batch_padded_tokens")
    return (real[0], padded[0]) if real and padded and real[0] > 0 else None
