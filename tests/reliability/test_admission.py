"""Exact admission, in process: capacity is counted in inputs (ATTNSERVE_MAX_QUEUE), a request takes all its
permits or none, and no permit leaks through refusals, completion or the pause/resume test hook. (< 5 s)"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx

from tests.reliability.conftest import assert_error, serving

CAPACITY = 8


async def until(condition: object, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def queue_gauge(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    return float(re.search(r"^attnserve_queue_depth (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


async def test_paused_capacity_eight_admits_eight_of_ten_and_leaks_nothing(bundle_dir: Path) -> None:
    async with serving(bundle_dir, max_queue=CAPACITY) as (app, client):
        batcher = app.state.engine.batcher
        batcher.pause()
        try:
            tasks = [asyncio.create_task(client.post("/embed", json={"inputs": f"single {i}"})) for i in range(10)]
            await until(lambda: batcher.depth == CAPACITY and sum(t.done() for t in tasks) == 2)
            refused = [t.result() for t in tasks if t.done()]
            for response in refused:
                assert_error(response, 429, "overloaded")
                assert response.headers["retry-after"]
        finally:
            batcher.resume()
        answered = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert sorted(r.status_code for r in answered) == [200] * 8 + [429] * 2
        assert batcher.in_flight == 0 and batcher.depth == 0 and await queue_gauge(client) == 0

        batcher.pause()  # 8 more fit again, and a batch that does not fit is refused whole
        try:
            singles = [asyncio.create_task(client.post("/embed", json={"inputs": f"again {i}"})) for i in range(6)]
            await until(lambda: batcher.depth == 6)
            assert_error(await client.post("/embed", json={"inputs": ["x", "y", "z"]}), 429, "overloaded")
            assert batcher.depth == 6 and batcher.in_flight == 6  # none of its three inputs was queued
            pair = asyncio.create_task(client.post("/embed", json={"inputs": ["two", "fit"]}))
            await until(lambda: batcher.depth == CAPACITY)
        finally:
            batcher.resume()
        answered = await asyncio.wait_for(asyncio.gather(*singles, pair), 30)
        assert [r.status_code for r in answered] == [200] * 7, [r.text for r in answered]
        assert len(answered[-1].json()) == 2
        assert batcher.in_flight == 0 and batcher.depth == 0 and await queue_gauge(client) == 0
