"""Exact admission, in process: capacity is counted in inputs (ATTNSERVE_MAX_QUEUE), a request takes all its
permits or none, and no permit leaks through refusals or completion. The graph is held by an injected fake
(tests.helpers.fakes.held): a one-input plug runs while the others queue. Every input is a text not sent
before: an answer cache hit would take no permit for long."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.helpers.fakes import GatedBundle, held
from tests.helpers.metrics import sample
from tests.helpers.serving import assert_error, serving, until
from tests.helpers.tiny import SENTENCES  # distinct token ids: none of them is an answer cache hit

QUEUED = 8
CAPACITY = QUEUED + 1  # the plug holds one permit while it runs


async def queue_gauge(client: httpx.AsyncClient) -> float:
    return sample((await client.get("/metrics")).text, "attnserve_queue_depth")


async def test_held_capacity_admits_eight_of_ten_and_leaks_nothing(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, wrap=GatedBundle.around, max_queue=CAPACITY) as (app, client):
        batcher = app.state.models.default.batcher
        async with held(app, client) as plug:
            tasks = [asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[i]})) for i in range(10)]
            await until(lambda: batcher.depth == QUEUED and sum(t.done() for t in tasks) == 2)
            refused = [t.result() for t in tasks if t.done()]
            for response in refused:
                assert_error(response, 429, "overloaded")
                assert response.headers["retry-after"]
        answered = await asyncio.wait_for(asyncio.gather(plug, *tasks), 30)
        assert sorted(r.status_code for r in answered) == [200] * 9 + [429] * 2
        assert batcher.in_flight == 0 and batcher.depth == 0 and await queue_gauge(client) == 0

        async with held(app, client) as plug:  # 8 fit again, and a request that does not fit is refused whole
            singles = [asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[10 + i]})) for i in range(6)]
            await until(lambda: batcher.depth == 6)
            assert_error(await client.post("/embed", json={"inputs": ["x", "y", "z"]}), 429, "overloaded")
            assert batcher.depth == 6 and batcher.in_flight == 7  # none of its three inputs was queued
            pair = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[20:22]}))
            await until(lambda: batcher.depth == QUEUED)
        answered = await asyncio.wait_for(asyncio.gather(plug, *singles, pair), 30)
        assert [r.status_code for r in answered] == [200] * 8, [r.text for r in answered]
        assert len(answered[-1].json()) == 2
        assert batcher.in_flight == 0 and batcher.depth == 0 and await queue_gauge(client) == 0
