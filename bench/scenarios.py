"""The load scenarios (a)-(e) and their payloads, identical for attnserve and the naive server.

  a  32 callers x 1 text of ~16 tokens    (does the batcher form batches from concurrent singles?)
  b   4 callers x 32 texts of ~128 tokens (throughput on client-side batches)
  c   4 callers x 8 texts of ~500 tokens  (long inputs, clipped to the bundle's max_length)
  d   1 caller  x 1 text of ~16 tokens    (sequential single-request latency)
  e   1 caller  x 1 text of 128 tokens on /attention (all layers and heads, base64 float16);
  e-embed: the same text on the embedding route, for the (e) ratio.
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
from bench.texts import make_texts, token_counts


@dataclass(frozen=True)
class Scenario:
    name: str
    workers: int
    texts: int
    length: int
    route: str = "embed"  # embed | attention


SCENARIOS = {
    "a": Scenario("a", 32, 1, 16),
    "b": Scenario("b", 4, 32, 128),
    "c": Scenario("c", 4, 8, 500),
    "d": Scenario("d", 1, 1, 16),
    "e": Scenario("e", 1, 1, 128, route="attention"),
    "e-embed": Scenario("e-embed", 1, 1, 128),
}
ROUTES = {"embed": "/embed", "openai": "/v1/embeddings", "attention": "/attention"}


def payloads(scenario: Scenario, tokenizer: Tokenizer, embed_route: str, pool: int = 64) -> list[Payload]:
    """`pool` distinct request bodies (one fixed text for e / e-embed, so both see the same input)."""
    count = 1 if scenario.name.startswith("e") else pool
    out = []
    for i in range(count):
        texts = make_texts(tokenizer, scenario.length, scenario.texts, seed=1000 * scenario.length + i)
        out.append(Payload(_body(scenario, texts, embed_route), len(texts), sum(token_counts(tokenizer, texts))))
    return out


def _body(scenario: Scenario, texts: list[str], embed_route: str) -> bytes:
    if scenario.route == "attention":
        return orjson.dumps({"inputs": texts[0], "encoding": "base64", "dtype": "float16"})
    if embed_route == "openai":
        return orjson.dumps({"input": texts, "model": "bench"})
    return orjson.dumps({"inputs": texts})


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


def run(url: str, port: int, scenario: Scenario, bodies: list[Payload], embed_route: str, duration_s: float,
        warmup_s: float, server_cpu: Callable[[], float] | None = None) -> LoadResult:
    path = path_of(scenario, embed_route)
    if warmup_s > 0:
        asyncio.run(run_load(port, path, bodies, scenario.workers, warmup_s))
    return asyncio.run(run_load(port, path, bodies, scenario.workers, duration_s, server_cpu))


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


def histogram_means(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict[str, float]:
    """Mean of each histogram over the interval between two snapshots (e.g. attnserve_batch_size)."""
    means = {}
    for name, (total, count) in after.items():
        old_total, old_count = before.get(name, [0.0, 0.0])
        if count > old_count:
            means[name] = (total - old_total) / (count - old_count)
    return means
