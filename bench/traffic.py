"""Mixed traffic on one server, sent by callers with keys (the server reads a keys file): bulk callers that
saturate it while an interactive caller sends single short texts (priorities), two bulk callers of unequal
demand (fair shares), and a corpus with repeated rows (the answer cache). Used by `python -m bench
--traffic` on the bench's bundle and by the limit checks of tests/reliability (test_traffic.py,
test_cache.py) on the test bundles: the same load, the same figures.

Every caller here is closed loop: each of its workers sends a request, waits for the answer, and sends the
next (the interactive caller pauses between requests, as a person or a service answering people does, so
the server idles between them when nothing else runs). Each worker has its own keep-alive connection
(bench.httpclient: a client that costs the shared machine little CPU).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import multiprocessing
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import orjson
from tokenizers import Tokenizer

from bench.httpclient import TRANSPORT_ERRORS, Client, quiet_heap
from bench.promtext import quantile, sample
from bench.texts import make_texts, token_counts

BULK_SHAPE = (64, 128)  # texts per request, tokens per text: what a backfill sends
INTERACTIVE_TOKENS = 16  # one text per request
INTERACTIVE_PAUSE_S = 0.05  # between an interactive caller's requests


@dataclass(frozen=True)
class Body:
    data: bytes
    texts: int
    tokens: int


@dataclass(frozen=True)
class Caller:
    """A caller of the keys file: its name, class, optional budget, and the key it sends."""

    name: str
    priority: str = "interactive"
    tokens_per_minute: int | None = None

    @property
    def key(self) -> str:
        return f"{self.name}-bench-key"

    def entry(self) -> str:
        budget = f"tokens_per_minute = {self.tokens_per_minute}\n" if self.tokens_per_minute else ""
        digest = hashlib.sha256(self.key.encode()).hexdigest()
        return f'[[key]]\nname = "{self.name}"\nsha256 = "{digest}"\npriority = "{self.priority}"\n{budget}\n'


def write_keys(path: Path, callers: Sequence[Caller]) -> Path:
    """The keys file of `callers`, replaced whole (written aside, then renamed over it)."""
    aside = path.with_name(path.name + ".new")
    aside.write_text("".join(c.entry() for c in callers))
    aside.replace(path)
    return path


def bodies(tokenizer: Tokenizer, texts: int, tokens: int, count: int, seed: int) -> list[Body]:
    """`count` distinct /embed bodies of `texts` texts of about `tokens` tokens each."""
    made = []
    for i in range(count):
        batch = make_texts(tokenizer, tokens, texts, seed=seed * 1000 + i)
        made.append(Body(orjson.dumps({"inputs": batch}), texts, sum(token_counts(tokenizer, batch))))
    return made


@dataclass
class Served:
    """What one caller got: answers by status, texts and tokens answered (200s), latencies of its 200s."""

    statuses: Counter[int] = field(default_factory=Counter)
    texts: int = 0
    tokens: int = 0
    latencies_s: list[float] = field(default_factory=list)
    retry_after: list[int] = field(default_factory=list)
    seconds: float = 0.0
    client_gc_s: float = 0.0  # the load client's longest garbage collection while it ran (bench.httpclient)

    def p99_ms(self) -> float:
        return float(np.percentile(self.latencies_s, 99)) * 1000 if self.latencies_s else float("nan")

    def texts_per_s(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class Load:
    """One caller's part of a run: its workers, what they send, and the interactive pause."""

    caller: Caller
    workers: int
    bodies: list[Body]
    pause_s: float = 0.0


async def _worker(url: str, load: Load, offset: int, deadline: float, served: Served) -> None:
    client, i = Client(url, timeout_s=120), offset
    headers = {"authorization": f"Bearer {load.caller.key}"}
    try:
        while time.perf_counter() < deadline:
            body = load.bodies[i % len(load.bodies)]
            i += 1
            await _send(client, body, headers, served)
            if load.pause_s:
                await asyncio.sleep(load.pause_s)
    finally:
        await client.aclose()


async def _send(client: Client, body: Body, headers: dict[str, str], served: Served) -> None:
    started = time.perf_counter()
    try:
        status, answer_headers, _ = await client.exchange("/embed", body.data, headers=headers)
    except TRANSPORT_ERRORS:
        served.statuses[0] += 1
        return
    served.statuses[status] += 1
    if status == 200:
        served.latencies_s.append(time.perf_counter() - started)
        served.texts, served.tokens = served.texts + body.texts, served.tokens + body.tokens
    elif "retry-after" in answer_headers:
        served.retry_after.append(int(answer_headers["retry-after"]))


async def run(url: str, loads: Sequence[Load], duration_s: float) -> dict[str, Served]:
    """Every load's workers at once for `duration_s`; what each caller got, by name."""
    served = {load.caller.name: Served() for load in loads}
    started = time.perf_counter()
    deadline = started + duration_s
    pauses: list[tuple[int, float]] = []
    with quiet_heap(pauses):
        await asyncio.gather(*(_worker(url, load, w, deadline, served[load.caller.name])
                               for load in loads for w in range(load.workers)))
    for one in served.values():
        one.seconds = time.perf_counter() - started
        one.client_gc_s = max((s for _, s in pauses), default=0.0)
    return served


# -- the three measurements ---------------------------------------------------------------------------------
SEARCH = Caller("search")
BULK = tuple(Caller(f"bulk-{i}", "bulk") for i in range(8))


@dataclass(frozen=True)
class Priorities:
    interactive_alone: Served
    bulk_alone: dict[str, Served]
    together: dict[str, Served]
    rounds_p99_ms: tuple[tuple[float, float], ...] = ()  # each round's interactive p99, alone and together

    def bulk_texts_per_s(self, served: dict[str, Served]) -> float:
        return sum(s.texts_per_s() for name, s in served.items() if name != SEARCH.name)


async def priorities(url: str, tokenizer: Tokenizer, duration_s: float, rounds: int = 4,
                     bulk_callers: int = len(BULK)) -> Priorities:
    """Interactive alone, bulk alone (`bulk_callers` callers x 64 texts x 128 tokens, 8 by default), then both,
    `duration_s` each, in `rounds` rounds (so a shared machine's load, which drifts over a minute, weighs on
    the three alike): the interactive caller's latency and the bulk throughput, each alone and together.

    The bulk callers run in a process of their own, as a backfill job is another program than a search front
    end: in one event loop with them, the interactive caller's answers waited behind the loop sending and
    reading 64-text bodies (same server, 8 bulk callers: a p99 ratio of 2.3x with them in one process,
    1.4x and 1.7x in two runs with them in another). Together, the interactive caller starts `SETTLE_S` after
    the bulk callers and stops as long before them, so every interactive request meets the whole bulk load."""
    texts, tokens = BULK_SHAPE
    bulk = [Load(c, 1, bodies(tokenizer, texts, tokens, 8, seed=i)) for i, c in enumerate(BULK[:bulk_callers])]
    query = Load(SEARCH, 1, bodies(tokenizer, 1, INTERACTIVE_TOKENS, 64, seed=99), INTERACTIVE_PAUSE_S)
    phases: list[list[dict[str, Served]]] = [[], [], []]
    loop, each = asyncio.get_running_loop(), duration_s / rounds
    if each <= 4 * SETTLE_S:
        raise ValueError(f"{duration_s:g} s in {rounds} rounds leaves the interactive caller too little time")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as elsewhere:
        await loop.run_in_executor(elsewhere, _started)  # the process starts (imports) before any timing
        for _ in range(rounds):
            phases[0].append(await run(url, [query], each))
            phases[1].append(await loop.run_in_executor(elsewhere, _run_here, url, bulk, each))
            bulk_run = loop.run_in_executor(elsewhere, _run_here, url, bulk, each)
            try:
                await asyncio.sleep(SETTLE_S)
                interactive = await run(url, [query], each - 2 * SETTLE_S)
            finally:
                bulk_load = await bulk_run  # the bulk callers' process ends its run before this one goes on
            phases[2].append({**interactive, **bulk_load})
    alone, bulk_alone, together = (merged(phase) for phase in phases)
    rounds_p99 = tuple((a[SEARCH.name].p99_ms(), t[SEARCH.name].p99_ms()) for a, t in zip(*phases[::2], strict=True))
    return Priorities(alone[SEARCH.name], bulk_alone, together, rounds_p99)


SETTLE_S = 0.25  # the bulk load fills the queue in less


def _started() -> None:
    """Nothing: run in the bulk callers' process once, so that its start is over before the load begins."""


def _run_here(url: str, loads: Sequence[Load], duration_s: float) -> dict[str, Served]:
    """`run` in this process (the bulk callers' own)."""
    return asyncio.run(run(url, loads, duration_s))


def merged(runs: Sequence[dict[str, Served]]) -> dict[str, Served]:
    """Several runs of the same callers as one: statuses, texts, tokens, latencies and seconds added up (the
    client's longest collection: the longest of any run)."""
    total: dict[str, Served] = {}
    for one in runs:
        for name, served in one.items():
            into = total.setdefault(name, Served())
            into.statuses.update(served.statuses)
            into.texts, into.tokens = into.texts + served.texts, into.tokens + served.tokens
            into.latencies_s += served.latencies_s
            into.retry_after += served.retry_after
            into.seconds += served.seconds
            into.client_gc_s = max(into.client_gc_s, served.client_gc_s)
    return total


async def fair_shares(url: str, tokenizer: Tokenizer, duration_s: float, workers: tuple[int, int] = (6, 2),
                      ) -> dict[str, Served]:
    """Two bulk callers at once, one with three times the other's concurrent requests (first come, first
    served would give it three quarters): what each got."""
    texts, tokens = BULK_SHAPE
    loads = [Load(BULK[i], n, bodies(tokenizer, texts, tokens, 8, seed=10 + i)) for i, n in enumerate(workers)]
    return await run(url, loads, duration_s)


def repeated_corpus(tokenizer: Tokenizer, rows: int, repeated: float, tokens: int, seed: int = 7) -> list[str]:
    """`rows` texts of about `tokens` tokens, of which the share `repeated` repeat an earlier row (spread over
    the corpus, each a random earlier row), the rest distinct."""
    rng = np.random.default_rng(seed)
    distinct = make_texts(tokenizer, tokens, rows, seed=seed)
    is_repeat = np.zeros(rows, dtype=bool)
    is_repeat[rng.choice(np.arange(1, rows), size=round(repeated * rows), replace=False)] = True
    corpus: list[str] = []
    for i in range(rows):
        corpus.append(corpus[int(rng.integers(0, len(corpus)))] if is_repeat[i] else distinct[i])
    return corpus


async def embed_corpus(url: str, corpus: Sequence[str], rows_per_request: int, workers: int) -> tuple[float, bytes]:
    """The corpus through /v1/embeddings (base64: the float32 bytes as served), `workers` requests in flight,
    each taking the next `rows_per_request` rows: (seconds, every row's vector bytes in corpus order)."""
    chunks = [list(corpus[i: i + rows_per_request]) for i in range(0, len(corpus), rows_per_request)]
    vectors: list[bytes] = [b""] * len(chunks)
    pending = iter(range(len(chunks)))

    async def worker() -> None:
        client = Client(url, timeout_s=300)
        try:
            for index in pending:
                body = orjson.dumps({"input": chunks[index], "encoding_format": "base64"})
                status, answer = await client.post("/v1/embeddings", body)
                if status != 200:
                    raise RuntimeError(f"/v1/embeddings answered {status}: {answer[:200]!r}")
                vectors[index] = b"".join(_b64(d["embedding"]) for d in orjson.loads(answer)["data"])
        finally:
            await client.aclose()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - started, b"".join(vectors)


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


def fully_cached(url: str, texts: Sequence[str]) -> tuple[float, float]:
    """Each text again, alone, one at a time (each must be an answer cache hit): the server's own median time
    for them (seconds, from its request histogram, as Prometheus' histogram_quantile reads it), and the share
    it served within 1 ms (a bucket bound)."""
    with httpx.Client(base_url=url, timeout=30) as client:
        before = client.get("/metrics").text
        for text in texts:
            answer = client.post("/embed", content=orjson.dumps({"inputs": text}),
                                 headers={"content-type": "application/json"})
            if answer.status_code != 200 or answer.headers.get("x-cached-inputs") != "1":
                raise RuntimeError(f"not a fully cached answer: {answer.status_code} {answer.text[:200]}")
        after = client.get("/metrics").text
    name, route = "attnserve_request_duration_seconds", {"route": "/embed"}
    under = sample(after, f"{name}_bucket", le="0.001", **route) - sample(before, f"{name}_bucket", le="0.001", **route)
    return quantile(before, after, name, 0.5, **route), under / len(texts)
