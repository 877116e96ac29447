"""The batcher's priority classes (the policy itself: test_fairqueue.py): interactive inputs ahead of queued
bulk ones, admission per class, bulk callers taking turns, the interactive lane beside a bulk batch, and the
threads each class runs on (bulk batches on the niced bulk threads, graph runs of both classes sharing the
run slots)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.errors import Overloaded
from inference.runtime.graphs import BatchKind, TokenSequence
from inference.scheduling.batcher import Batcher
from inference.scheduling.fairqueue import Caller
from inference.scheduling.slots import SharedSlots
from inference.scheduling.work import BatchLimits
from tests.helpers.batching import FakeRunner, plugged, submit
from tests.helpers.serving import until

SEARCH, BACKFILL, REINDEX = Caller("search"), Caller("backfill", "bulk"), Caller("reindex", "bulk")


async def submit_as(batcher: Batcher, caller: Caller, lengths: list[int]):
    return await submit(batcher, lengths, caller=caller)


async def test_an_interactive_request_runs_before_bulk_inputs_queued_earlier(setup):
    batcher, runner = setup  # size cap 4, 8 permits
    async with plugged(batcher, runner):
        bulk = asyncio.create_task(submit_as(batcher, BACKFILL, [7] * 4))  # 4 bulk permits: its whole share
        await until(lambda: batcher.depth == 4)
        query = asyncio.create_task(submit_as(batcher, SEARCH, [3]))
        await until(lambda: batcher.depth == 5)
    assert await query == [("fast", 3)] and await bulk == [("fast", 7)] * 4
    assert runner.batches == [[3], [7, 7, 7, 7]]  # the later interactive input ran first, alone: no mixing


async def test_bulk_requests_are_refused_at_their_share_while_interactive_ones_still_fit(setup):
    batcher, runner = setup  # 8 permits, bulk_queue 4
    async with plugged(batcher, runner):  # the plug: 1 interactive permit
        bulk = asyncio.create_task(submit_as(batcher, BACKFILL, [7] * 4))
        await until(lambda: batcher.depth == 4)
        assert batcher.full_for("bulk") and not batcher.full
        with pytest.raises(Overloaded):
            batcher.admit(1, REINDEX)
        query = asyncio.create_task(submit_as(batcher, SEARCH, [3, 3, 3]))  # 1 + 4 + 3 = 8: fits
        await until(lambda: batcher.depth == 7)
        assert batcher.full
    await asyncio.gather(bulk, query)
    assert batcher.in_flight == 0


async def test_two_bulk_callers_take_turns(setup):
    batcher, runner = setup
    batcher.limits.max_batch_size = 1
    async with plugged(batcher, runner):
        first = asyncio.create_task(submit_as(batcher, BACKFILL, [7, 7, 7]))
        await until(lambda: batcher.depth == 3)
        second = asyncio.create_task(submit_as(batcher, REINDEX, [5]))
        await until(lambda: batcher.depth == 4)
    await asyncio.gather(first, second)
    assert runner.batches == [[7], [5], [7], [7]]  # reindex's one input does not wait for all of backfill's


@pytest.mark.parametrize("lane", [True, False])
async def test_the_interactive_lane_runs_an_interactive_batch_beside_a_bulk_one(lane: bool):
    runner = FakeRunner()
    executor = ThreadPoolExecutor(2)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, interactive_lane=lane), executor)
    batcher.start()
    runner.gate.clear()
    bulk = asyncio.create_task(submit_as(batcher, BACKFILL, [7, 7]))
    await until(lambda: runner.waiting == 1)  # the one slot runs a bulk batch
    query = asyncio.create_task(submit_as(batcher, SEARCH, [3]))
    if lane:
        await until(lambda: runner.waiting == 2 and batcher.depth == 0)  # started at once, beside it
        assert not query.done() and batcher.stats.at_once == 3  # the bulk batch, then the query: never queued
    more = asyncio.create_task(submit_as(batcher, SEARCH, [2]))
    more_too = asyncio.create_task(submit_as(batcher, SEARCH, [2]))
    await until(lambda: batcher.depth == (2 if lane else 3))  # the lane (when kept) and the slot are busy: they wait
    assert runner.waiting == (2 if lane else 1)
    runner.gate.set()
    assert await asyncio.gather(bulk, query, more, more_too) == [
        [("fast", 7)] * 2, [("fast", 3)], [("fast", 2)], [("fast", 2)]]
    expected = [[2, 2], [3], [7, 7]] if lane else [[2, 2, 3], [7, 7]]  # without the lane, one batch took them all
    assert sorted(map(sorted, runner.batches)) == expected
    await batcher.stop()
    executor.shutdown()


class ThreadRunner(FakeRunner):
    """A FakeRunner that also records, per batch, the thread it ran on and the most runs at once."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[int, str] = {}  # first length of each batch -> its thread's name
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __call__(
        self, kind: BatchKind, seqs: list[TokenSequence], adapters: Sequence[int] = (),
    ) -> list[tuple[str, int]]:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            self.threads[len(seqs[0])] = threading.current_thread().name
            return super().__call__(kind, seqs, adapters)
        finally:
            with self._lock:
                self.now -= 1


async def test_each_class_runs_on_its_own_threads_and_both_share_the_run_slots():
    """Two batchers (two models) as start_models builds them: one run slot shared by the graph thread and the
    bulk thread, and one lane thread. A bulk batch runs on the bulk thread; the other model's interactive
    batch, though its own batcher has a slot free, waits for the shared slot; the first model's interactive
    batch runs on the lane beside the bulk one (never more than graph_runs + 1 runs at once)."""
    runner = ThreadRunner()
    slots = threading.Semaphore(1)
    graphs = SharedSlots(ThreadPoolExecutor(1, thread_name_prefix="graph"), slots)
    bulk_threads = SharedSlots(ThreadPoolExecutor(1, thread_name_prefix="bulk"), slots)
    lane = ThreadPoolExecutor(1, thread_name_prefix="lane")
    limits = BatchLimits(64, 4, 16, 5.0, interactive_lane=True)
    first, second = (Batcher(runner, limits, graphs, lane=lane, bulk=bulk_threads) for _ in range(2))
    first.start(), second.start()
    runner.gate.clear()
    bulk = asyncio.create_task(submit_as(first, BACKFILL, [7]))
    await until(lambda: runner.waiting == 1)
    other = asyncio.create_task(submit_as(second, SEARCH, [2]))
    await until(lambda: second.in_flight == 1 and second.depth == 0)  # in a batch of its own free slot
    query = asyncio.create_task(submit_as(first, SEARCH, [3]))
    await until(lambda: runner.waiting == 2 and first.depth == 0)  # the lane's run, beside the bulk one
    assert 2 not in runner.threads  # the other model's batch waits for the slot the bulk batch holds
    runner.gate.set()
    assert await asyncio.gather(bulk, query, other) == [[("fast", 7)], [("fast", 3)], [("fast", 2)]]
    assert runner.threads[7].startswith("bulk") and runner.threads[3].startswith("lane")
    assert runner.threads[2].startswith("graph") and runner.most == 2
    await asyncio.gather(first.stop(), second.stop())
    graphs.shutdown(), bulk_threads.shutdown(), lane.shutdown()


async def test_the_lane_is_only_for_interactive_inputs_waiting_behind_bulk_batches(setup):
    batcher, runner = setup  # one slot; the lane is off in BatchLimits by default, so turn it on here
    batcher.limits.interactive_lane = True
    async with plugged(batcher, runner):  # the plug is interactive: no lane beside it
        query = asyncio.create_task(submit_as(batcher, SEARCH, [3]))
        bulk = asyncio.create_task(submit_as(batcher, BACKFILL, [7]))
        await until(lambda: batcher.depth == 2)
        assert runner.waiting == 1
    await asyncio.gather(query, bulk)
    assert runner.batches == [[3], [7]]
