"""The batcher's idle path: a request that finds nothing queued and a run slot free starts at once, as the one
batch the worker would have made of it, without passing through the queue (`Batcher.stats` counts each
way). Proven with the gated fake runner, never with a clock: what runs at once shows as a held run with
nothing queued; what does not shows in `depth` and `stats.queued`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.errors import InferenceFailed
from inference.runtime.graphs import FAST
from inference.scheduling.batcher import Batcher
from inference.scheduling.fairqueue import Caller
from inference.scheduling.work import BatchLimits
from tests.helpers.batching import FakeRunner, plugged, seq, submit
from tests.helpers.serving import until

BACKFILL, SEARCH = Caller("backfill", "bulk"), Caller("search")


async def test_a_lone_request_runs_at_once_as_one_batch(setup):
    batcher, runner = setup  # one slot, size cap 4, 64 tokens
    assert await submit(batcher, [3]) == [("fast", 3)]
    assert await submit(batcher, [5, 2, 4]) == [("fast", 5), ("fast", 2), ("fast", 4)]
    assert (batcher.stats.at_once, batcher.stats.queued) == (4, 0)
    assert runner.batches == [[3], [5, 2, 4]]
    assert batcher.in_flight == 0


async def test_a_request_to_a_busy_batcher_queues(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):  # the plug ran at once; it holds the one slot
        tasks = [asyncio.create_task(submit(batcher, [3])) for _ in range(3)]
        await until(lambda: batcher.depth == 3)
    assert await asyncio.gather(*tasks) == [[("fast", 3)]] * 3
    assert (batcher.stats.at_once, batcher.stats.queued) == (1, 3)
    assert runner.batches == [[3, 3, 3]]  # batched behind the plug, as before


@pytest.mark.parametrize("lengths", [[2] * 5, [40, 40]], ids=["size cap", "token cap"])
async def test_a_request_the_caps_would_cut_queues(setup, lengths: list[int]):
    batcher, runner = setup
    assert await submit(batcher, lengths) == [("fast", n) for n in lengths]
    assert (batcher.stats.at_once, batcher.stats.queued) == (0, len(lengths))
    assert all(len(b) <= 4 and max(b) * len(b) <= 64 for b in runner.batches) and len(runner.batches) == 2


async def test_an_input_longer_than_the_token_budget_runs_at_once_alone(setup):
    batcher, runner = setup
    assert await submit(batcher, [100]) == [("fast", 100)]  # the worker runs it alone too
    assert batcher.stats.at_once == 1 and runner.batches == [[100]]


async def test_with_two_free_slots_a_request_is_still_shared_out():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(2)
    batcher = Batcher(runner, BatchLimits(256, 8, 32, 5.0, runs_in_flight=2), executor)
    batcher.start()
    assert await submit(batcher, [4] * 8) == [("fast", 4)] * 8
    assert runner.batches == [[4] * 4, [4] * 4] and batcher.stats.queued == 8
    assert await submit(batcher, [4]) == [("fast", 4)]  # one input: nothing to share out
    assert batcher.stats.at_once == 1
    await batcher.stop()
    executor.shutdown()


async def test_batch_wait_holds_a_lone_request_for_partners_unless_urgent():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, batch_wait_s=3600), executor)
    batcher.start()
    with batcher.admit(1) as ticket:
        assert await batcher.submit(ticket, FAST, [seq(3)], urgent=True) == [("fast", 3)]
    assert batcher.stats.at_once == 1
    waiting = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: batcher.depth == 1)  # waits for partners, as the operator asked
    batcher.drain()
    assert await waiting == [("fast", 3)]
    assert (batcher.stats.at_once, batcher.stats.queued) == (1, 1)
    await batcher.stop()
    executor.shutdown()


async def test_a_failed_run_at_once_fails_its_request_and_the_batcher_goes_on(setup):
    batcher, runner = setup
    runner.fail = True
    with pytest.raises(InferenceFailed) as failed:
        await submit(batcher, [3, 3])
    assert "secret" not in str(failed.value) and not batcher.last_ok and batcher.stats.at_once == 2
    runner.fail = False
    assert await submit(batcher, [2]) == [("fast", 2)] and batcher.last_ok
    assert batcher.in_flight == 0


async def test_a_cancelled_request_keeps_its_slot_and_permits_until_its_run_ends(setup):
    """A graph run cannot be interrupted: the client leaving frees nothing until the run ends, as for a batch
    the worker started."""
    batcher, runner = setup
    runner.gate.clear()
    gone = asyncio.create_task(submit(batcher, [7, 7]))
    await until(lambda: runner.waiting == 1)
    gone.cancel()
    await until(lambda: gone.done())
    assert batcher.in_flight == 2  # still running: its permits are held
    later = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: batcher.depth == 1)  # the slot is still taken: it queues
    runner.gate.set()
    assert await later == [("fast", 3)]
    assert runner.batches == [[7, 7], [3]]
    await until(lambda: batcher.in_flight == 0)


async def test_a_request_cancelled_before_its_run_starts_is_not_run(setup):
    batcher, runner = setup
    request = asyncio.create_task(submit(batcher, [3]))
    await asyncio.sleep(0)  # submitted: its run task is made, not yet started
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    await until(lambda: batcher.in_flight == 0)
    assert await submit(batcher, [2]) == [("fast", 2)]
    assert runner.batches in ([[2]], [[3], [2]])  # skipped, unless its thread had taken it already


async def test_stop_waits_for_a_run_started_at_once():
    runner = FakeRunner()
    runner.gate.clear()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0), executor)
    batcher.start()
    request = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: runner.waiting == 1)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # the admitted request is not answered yet
    runner.gate.set()
    await stopping
    assert await request == [("fast", 3)] and batcher.in_flight == 0
    executor.shutdown()


async def test_the_lane_takes_an_interactive_request_at_once_and_a_bulk_one_queues():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(2)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, interactive_lane=True), executor)
    batcher.start()
    runner.gate.clear()
    bulk = asyncio.create_task(submit(batcher, [7], caller=BACKFILL))  # the one slot: a bulk batch
    await until(lambda: runner.waiting == 1)
    more_bulk = asyncio.create_task(submit(batcher, [6], caller=BACKFILL))
    await until(lambda: batcher.depth == 1)  # bulk does not take the lane
    query = asyncio.create_task(submit(batcher, [3], caller=SEARCH))
    await until(lambda: runner.waiting == 2)  # beside the bulk batch, on the lane, at once
    assert batcher.depth == 1 and batcher.stats.at_once == 2  # the first bulk input and the query
    runner.gate.set()
    assert await asyncio.gather(bulk, more_bulk, query) == [[("fast", 7)], [("fast", 6)], [("fast", 3)]]
    await batcher.stop()
    executor.shutdown()


async def test_with_the_idle_path_off_every_input_queues(setup):
    batcher, runner = setup
    batcher.at_once = False  # bench.lone's baseline
    assert await submit(batcher, [3]) == [("fast", 3)]
    assert (batcher.stats.at_once, batcher.stats.queued) == (0, 1)
