"""The idle path through the whole server, on the tiny bundle: a lone request runs at once (the metrics count
it) and its vectors are bit for bit those of the same request queued and run as the same batch; the answer
cache still answers repeats before any run; a client that leaves mid-run holds its permits until the run ends,
as before.
"""

from __future__ import annotations

import asyncio

import numpy as np

from tests.helpers.fakes import GatedBundle, held
from tests.helpers.metrics import sample
from tests.helpers.serving import serving, until

TEXTS = ["a warm and funny film", "the plot makes no sense at all", "dull", "a film about a film"]


def at_once(app) -> float:
    return sample(app.state.metrics.render().decode(), "attnserve_inputs_run_at_once_total")


async def test_a_request_run_at_once_equals_the_same_request_queued_bit_for_bit(tiny_bundle):
    """The idle path runs the batch the worker would have made of the request alone: the same graph on the same
    rows gives the same bits. Sharing a batch with other requests' inputs changes the padding, and then the
    graph's batch invariance (within float rounding, tests/export/test_batch_invariance.py) is what holds."""
    async with serving(tiny_bundle, wrap=GatedBundle.around, cache_bytes=0) as (app, client):
        batcher = app.state.models.default.batcher
        before, queued = at_once(app), batcher.stats.queued
        lone = [await embed(client, text) for text in TEXTS]
        whole = await embed(client, TEXTS)
        assert at_once(app) - before == 2 * len(TEXTS) and batcher.stats.queued == queued
        async with held(app, client) as plug:  # the plug runs at once and holds the slot: the rest queue
            alone = asyncio.create_task(embed(client, TEXTS))
            await until(lambda: batcher.depth == len(TEXTS))
        await plug
        assert np.array_equal(await alone, whole)  # queued, then run as the same batch: the same bits
        async with held(app, client) as plug:
            tasks = [asyncio.create_task(embed(client, t)) for t in TEXTS * 2]
            await until(lambda: batcher.depth == len(tasks))
        await plug
        shared = await asyncio.gather(*tasks)
        assert batcher.stats.queued - queued == 3 * len(TEXTS) and at_once(app) - before == 2 * len(TEXTS) + 2
        for got, text in zip(shared, TEXTS * 2, strict=True):  # one batch of 8, padded to the longest
            np.testing.assert_allclose(got, lone[TEXTS.index(text)], rtol=0, atol=1e-6)
        async with held(app, client) as plug:
            alone = asyncio.create_task(embed(client, TEXTS[1]))
            await until(lambda: batcher.depth == 1)
        await plug
        assert np.array_equal(await alone, lone[1])


async def embed(client, inputs) -> np.ndarray:
    response = await client.post("/embed", json={"inputs": inputs})
    assert response.status_code == 200, response.text
    return np.array(response.json(), np.float32)


async def test_the_idle_path_keeps_the_answer_cache_and_serves_bulk_requests(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client):  # the cache on
        batcher = app.state.models.default.batcher
        before = batcher.stats.at_once  # warm-up's runs
        first = await client.post("/embed", json={"inputs": TEXTS[0]})
        again = await client.post("/embed", json={"inputs": TEXTS[0]})
        assert first.json() == again.json()
        assert batcher.stats.at_once - before == 1  # the repeat came from the cache: no run at all
        assert sample(app.state.metrics.render().decode(), "attnserve_cache_hits_total") == 1
        bulk = await client.post("/embed", json={"inputs": TEXTS[1]}, headers={"x-priority": "bulk"})
        assert bulk.status_code == 200 and batcher.stats.at_once - before == 2  # bulk, idle: at once (bulk threads)


async def test_a_client_gone_mid_run_frees_its_permits_when_the_run_ends(tiny_bundle):
    async with serving(tiny_bundle, wrap=GatedBundle.around, cache_bytes=0) as (app, client):
        batcher, gated = app.state.models.default.batcher, app.state.models.default.bundle
        gated.gate.clear()
        gone = asyncio.create_task(client.post("/embed", json={"inputs": TEXTS}))
        await until(lambda: gated.waiting == 1)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert batcher.in_flight == len(TEXTS)  # the run cannot be interrupted: its inputs stay admitted
        gated.gate.set()
        await until(lambda: batcher.in_flight == 0)
        assert (await client.post("/embed", json={"inputs": TEXTS[0]})).status_code == 200
