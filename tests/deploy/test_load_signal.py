"""The autoscaling signal, `attnserve_inputs_in_flight` (deploy/kubernetes/components/keda), under real overload.

Exact: a real uvicorn server in this process whose graph runs the test holds (tests.helpers.fakes): with the
graph held, each request queued raises the gauge by its inputs on top of the one running input, a full server
refuses the next request with 429 without moving it, and once released the gauge is 0 again.
Open loop: a real `attnserve serve` process with a small --max-queue, flooded by concurrent clients until it
refuses work: at every scrape the gauge lies between the queue depth and the admission limit, it reaches at
least one request's inputs while the server is overloaded, and it returns to exactly 0 once the flood stops.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.fakes import GatedBundle, held
from tests.helpers.process import running
from tests.helpers.serving import until, uvicorn_here
from tests.helpers.tiny import SENTENCES

SIGNAL = "attnserve_inputs_in_flight"
DEPTH = "attnserve_queue_depth"


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    """One /metrics answer's samples labelled by model only, summed over the models, by name (one snapshot:
    the route runs on the loop)."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            if set(s.labels) == {"model", "caller"}:
                totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


# -- exact counts, graph held ---------------------------------------------------------------------------
REQUESTS, INPUTS_EACH = 4, 5
LIMIT = 1 + REQUESTS * INPUTS_EACH  # the plug's one input, then every queued request fills the server


async def test_gauge_follows_the_queue_exactly_and_returns_to_zero(tiny_bundle: Path) -> None:
    async with (
        uvicorn_here(tiny_bundle, GatedBundle.around, max_queue=LIMIT) as (app, url),
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        assert (await scrape(client))[SIGNAL] == 0  # after warm-up
        batcher = app.state.models.default.batcher
        async with held(app, client) as plug:
            assert (await scrape(client))[SIGNAL] == 1  # the plug, running
            tasks = []
            for n in range(1, REQUESTS + 1):
                body = {"inputs": SENTENCES[n * INPUTS_EACH: (n + 1) * INPUTS_EACH]}  # distinct: none runs once
                tasks.append(asyncio.create_task(client.post("/embed", json=body)))
                await until(lambda n=n: batcher.depth == n * INPUTS_EACH)
                seen = await scrape(client)
                assert (seen[DEPTH], seen[SIGNAL]) == (n * INPUTS_EACH, 1 + n * INPUTS_EACH)
            refused = await client.post("/embed", json={"inputs": "one too many"})
            assert refused.status_code == 429
            assert (await scrape(client))[SIGNAL] == LIMIT  # a refusal takes no permit
        answers = await asyncio.gather(plug, *tasks)
        assert [a.status_code for a in answers] == [200] * (1 + REQUESTS)
        seen = await scrape(client)
        assert (seen[DEPTH], seen[SIGNAL]) == (0, 0)


# -- open loop, a real server process -------------------------------------------------------------------
MAX_QUEUE, FLOOD_INPUTS, CLIENTS = 48, 16, 8  # 8 clients x 16 inputs ask for 128 permits of 48
FLOOD_TEXT = " ".join(["the queue fills up while the graph runs"] * 12)


async def flood(client: httpx.AsyncClient, statuses: Counter[int], stop_flood: asyncio.Event) -> None:
    deadline = time.monotonic() + 120  # bounded even if the test's condition never holds
    body = {"inputs": [f"{SENTENCES[i]} {FLOOD_TEXT}" for i in range(FLOOD_INPUTS)]}  # distinct token ids
    while not stop_flood.is_set() and time.monotonic() < deadline:
        statuses[(await client.post("/embed", json=body)).status_code] += 1


async def watch(client: httpx.AsyncClient, scrapes: list[dict[str, float]], stop_watch: asyncio.Event) -> None:
    while not stop_watch.is_set():
        scrapes.append(await scrape(client))
        await asyncio.sleep(0.02)  # pacing, not synchronisation: leave the two cores to the flood


async def test_gauge_rises_under_real_overload_and_returns_to_zero(tiny_bundle: Path, tmp_path: Path) -> None:
    flags = ("--max-queue", str(MAX_QUEUE), "--max-batch-size", "8", "--cache-bytes", "0")  # every request runs
    with running(tiny_bundle, tmp_path / "server.log", *flags) as server:
        limits = httpx.Limits(max_connections=CLIENTS + 1)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
            statuses: Counter[int] = Counter()
            scrapes: list[dict[str, float]] = []
            done = asyncio.Event()
            tasks = [asyncio.create_task(flood(client, statuses, done)) for _ in range(CLIENTS)]
            watcher = asyncio.create_task(watch(client, scrapes, done))
            try:  # overloaded (refusing) and seen loaded by a scrape, however long the machine takes
                await until(lambda: statuses[429] > 0 and any(s[SIGNAL] >= FLOOD_INPUTS for s in scrapes), 90)
            finally:
                done.set()
                await asyncio.gather(*tasks, watcher)
            assert set(statuses) <= {200, 429} and statuses[200] > 0, statuses
            assert all(s[DEPTH] <= s[SIGNAL] <= MAX_QUEUE for s in scrapes), scrapes
            after = await scrape(client)
            assert (after[DEPTH], after[SIGNAL]) == (0, 0)
    assert server.proc.returncode == 0, server.log()
