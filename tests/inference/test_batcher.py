"""The batcher with a fake runner (the queue on its own: test_batchqueue.py): batching, caps, admission,
timeouts, failures, cancellation, drain, several runs in flight (priority classes, the interactive lane and
the threads each class runs on: test_batcher_classes.py).

Batching is proven without timing: the fake runner holds its first run (a one-input "plug") at a gate, so
everything submitted meanwhile queues, and the runs after the gate opens show how the queue was cut.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import pytest_asyncio

from inference.errors import InferenceFailed, NotReady, Overloaded, QueueTimeout
from inference.runtime.graphs import ATTENTION, FAST
from inference.scheduling.batcher import Batcher
from inference.scheduling.work import BatchLimits
from tests.helpers.batching import FakeRunner, plugged, seq, submit
from tests.helpers.serving import until


# -- the batcher ----------------------------------------------------------------------------------------
async def test_results_come_back_in_order(setup):
    batcher, _ = setup
    assert await submit(batcher, [3, 1, 2]) == [("fast", 3), ("fast", 1), ("fast", 2)]


async def test_concurrent_submits_form_one_batch(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):
        tasks = [asyncio.create_task(submit(batcher, [5])) for _ in range(4)]
        await until(lambda: batcher.depth == 4)
    assert await asyncio.gather(*tasks) == [[("fast", 5)]] * 4
    assert runner.batches == [[5, 5, 5, 5]]


async def test_size_and_token_caps_hold(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):
        small = asyncio.create_task(submit(batcher, [2] * 5))  # size cap 4 -> 2 batches
        big = asyncio.create_task(submit(batcher, [40, 40]))  # 2 x 40 > 64 tokens -> one each
        await until(lambda: batcher.depth == 7)
    await asyncio.gather(small, big)
    assert all(len(b) <= 4 and max(b) * len(b) <= 64 for b in runner.batches)
    assert sorted(x for b in runner.batches for x in b) == sorted([2] * 5 + [40, 40])
    assert len(runner.batches) == 4


async def test_different_kinds_never_share_a_batch(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):
        a = asyncio.create_task(submit(batcher, [3, 4], FAST))
        b = asyncio.create_task(submit(batcher, [3], ATTENTION))
        await until(lambda: batcher.depth == 3)
    assert await b == [("attention", 3)]
    await a
    assert sorted(runner.batches) == [[3], [3, 4]]


async def test_full_queue_refuses_whole_request_at_once(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):  # the plug holds 1 of the 8 permits
        held = asyncio.create_task(submit(batcher, [1] * 5))
        await until(lambda: batcher.depth == 5)
        with pytest.raises(Overloaded) as refused:
            batcher.admit(3)  # 6 + 3 > 8: none of the 3 is admitted
        assert refused.value.retry_after_s >= 1
        assert batcher.in_flight == 6
        batcher.admit(2).__exit__()  # 8 fits; unused permits come back
        assert batcher.in_flight == 6
    await held
    assert batcher.in_flight == 0


async def test_queue_timeout_fails_and_does_not_run(setup):
    batcher, runner = setup
    batcher.limits.queue_timeout_s = 0.05
    async with plugged(batcher, runner):
        with pytest.raises(QueueTimeout):
            await submit(batcher, [4, 4])
        assert batcher.depth == 0
    await until(lambda: batcher.in_flight == 0)
    assert runner.batches == [] and batcher.depth == 0


async def test_failing_runner_reaches_every_waiter_and_batcher_goes_on(setup):
    batcher, runner = setup
    runner.fail, runner.gate = True, threading.Event()
    plug = asyncio.create_task(submit(batcher, [1]))
    await until(lambda: runner.waiting == 1)
    tasks = [asyncio.create_task(submit(batcher, [3])) for _ in range(3)]
    await until(lambda: batcher.depth == 3)
    runner.gate.set()
    results = await asyncio.gather(plug, *tasks, return_exceptions=True)
    assert runner.batches == [[1], [3, 3, 3]]
    assert all(isinstance(r, InferenceFailed) for r in results)
    assert "secret" not in str(results[1])
    assert not batcher.last_ok
    runner.fail = False
    assert await submit(batcher, [2]) == [("fast", 2)]
    assert batcher.last_ok


async def test_output_count_is_checked(setup):
    batcher, runner = setup
    runner.short = True
    with pytest.raises(InferenceFailed):
        await submit(batcher, [2, 2])


async def test_cancelled_requests_are_skipped(setup):
    batcher, runner = setup
    async with plugged(batcher, runner):
        gone = asyncio.create_task(submit(batcher, [7, 7]))
        kept = asyncio.create_task(submit(batcher, [3]))
        await until(lambda: batcher.depth == 3)
        gone.cancel()
        await until(lambda: batcher.depth == 1)
    assert await kept == [("fast", 3)]
    assert runner.batches == [[3]]
    await until(lambda: batcher.in_flight == 0)


@pytest.mark.parametrize("runs", [1, 2])
async def test_stop_drains_admitted_work_and_refuses_new(runs: int):
    runner = FakeRunner()
    runner.gate.clear()
    executor = ThreadPoolExecutor(runs)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, runs_in_flight=runs), executor)
    batcher.start()
    tasks = [asyncio.create_task(submit(batcher, [2])) for _ in range(6)]
    await until(lambda: runner.waiting == runs and batcher.in_flight == 6)  # runs held at the gate, the rest queued
    stopping = asyncio.create_task(batcher.stop())
    await until(lambda: refuses(batcher))
    assert not stopping.done()  # admitted work is not finished yet
    runner.gate.set()
    await stopping
    assert await asyncio.gather(*tasks) == [[("fast", 2)]] * 6
    assert sum(len(b) for b in runner.batches) == 6 and batcher.in_flight == 0
    executor.shutdown()


def refuses(batcher: Batcher) -> bool:
    """True once admission is refused because the batcher is stopping."""
    try:
        batcher.admit(1).__exit__()
    except NotReady:
        return True
    return False


async def test_batch_wait_gathers_late_arrivals_until_the_batch_is_full():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 2, 16, 5.0, batch_wait_s=3600), executor)
    batcher.start()
    first = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: batcher.depth == 1)  # waiting for more: an hour, unless the batch fills
    second = asyncio.create_task(submit(batcher, [3]))
    results = await asyncio.wait_for(asyncio.gather(first, second), 10)  # the full batch runs at once
    assert results == [[("fast", 3)]] * 2 and runner.batches == [[3, 3]]
    await batcher.stop()
    executor.shutdown()


async def test_drain_runs_what_waits_for_batch_partners_at_once():
    """Shutdown has begun: inputs waiting an hour for partners run now, and later ones do not wait either."""
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, batch_wait_s=3600), executor)
    batcher.start()
    first = asyncio.create_task(submit(batcher, [3, 5]))
    await until(lambda: batcher.depth == 2)
    batcher.drain()
    assert await asyncio.wait_for(first, 10) == [("fast", 3), ("fast", 5)]
    assert await asyncio.wait_for(submit(batcher, [2]), 10) == [("fast", 2)]  # admission stays open
    assert runner.batches == [[3, 5], [2]]
    await batcher.stop()
    executor.shutdown()


async def test_urgent_inputs_do_not_wait_for_batch_partners():
    """Warm-up and readiness probes run at once, whatever batch_wait_s says."""
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, batch_wait_s=3600), executor)
    batcher.start()
    with batcher.admit(1) as ticket:
        assert await asyncio.wait_for(batcher.submit(ticket, FAST, [seq(4)], urgent=True), 10) == [("fast", 4)]
    waiting = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: batcher.depth == 1)  # an ordinary input still waits for partners
    assert not waiting.done()
    batcher.drain()
    await asyncio.wait_for(waiting, 10)
    await batcher.stop()
    executor.shutdown()


async def test_batch_wait_flushes_a_batch_that_does_not_fill():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, batch_wait_s=0.01), executor)
    batcher.start()
    assert await submit(batcher, [3]) == [("fast", 3)]
    assert runner.batches == [[3]]
    await batcher.stop()
    executor.shutdown()


# -- several runs in flight -----------------------------------------------------------------------------
@pytest_asyncio.fixture(loop_scope="function")
async def two_slots():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(2)
    batcher = Batcher(runner, BatchLimits(256, 8, 32, 5.0, runs_in_flight=2), executor)
    batcher.start()
    yield batcher, runner
    runner.gate.set()
    await batcher.stop()
    executor.shutdown()


async def test_a_second_batch_runs_while_the_first_is_running(two_slots):
    batcher, runner = two_slots
    async with plugged(batcher, runner):  # the plug holds one slot
        later = asyncio.create_task(submit(batcher, [5, 5, 5]))
        await until(lambda: runner.waiting == 2)  # taken by the free slot, not queued behind the plug
        assert batcher.depth == 0
    assert await later == [("fast", 5)] * 3
    assert runner.batches == [[5, 5, 5]]


async def test_waiting_inputs_are_shared_out_among_free_slots(two_slots):
    batcher, runner = two_slots
    runner.gate.clear()
    request = asyncio.create_task(submit(batcher, [4] * 8))  # size cap 8, but two slots are free
    await until(lambda: runner.waiting == 2)
    assert batcher.depth == 0
    runner.gate.set()
    assert await request == [("fast", 4)] * 8
    assert runner.batches == [[4] * 4, [4] * 4]


async def test_a_busy_slot_leaves_the_whole_queue_to_the_free_one(two_slots):
    batcher, runner = two_slots
    async with plugged(batcher, runner):
        waiting = asyncio.create_task(submit(batcher, [4] * 8))
        await until(lambda: runner.waiting == 2)
    assert await waiting == [("fast", 4)] * 8
    assert runner.batches == [[4] * 8]  # one free slot: one batch up to the size cap


@pytest.mark.parametrize("runs", [1, 2])
async def test_a_full_batch_shared_out_among_slots_runs_whole_under_batch_wait(runs: int):
    """With batch_wait an hour, a queue that fills a batch runs at once, on every free slot: no input is
    left behind to wait out the hour again (it was, with two slots, before the batches were taken together)."""
    runner = FakeRunner()
    executor = ThreadPoolExecutor(runs)
    batcher = Batcher(runner, BatchLimits(256, 8, 32, 5.0, batch_wait_s=3600, runs_in_flight=runs), executor)
    batcher.start()
    runner.gate.clear()
    request = asyncio.create_task(submit(batcher, [4] * 8))
    await until(lambda: runner.waiting == runs)  # every slot took its share before any run ended
    assert batcher.depth == 0
    runner.gate.set()
    assert await asyncio.wait_for(request, 10) == [("fast", 4)] * 8
    assert sorted(map(len, runner.batches)) == [8 // runs] * runs
    await batcher.stop()
    executor.shutdown()


async def test_inputs_that_waited_behind_a_long_run_are_not_held_for_batch_wait_again():
    """batch_wait counts from the oldest waiting input's arrival: inputs queued behind a long run have
    waited already, so they run as soon as the slot frees, not batch_wait later."""
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(256, 8, 32, 5.0, batch_wait_s=1.0), executor)
    batcher.start()
    runner.gate.clear()
    first = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: runner.waiting == 1)  # taken after its 1 s wait; now held at the gate
    second = asyncio.create_task(submit(batcher, [3]))
    await until(lambda: batcher.depth == 1)
    await asyncio.sleep(1.1)  # longer than batch_wait: the second input has waited it out behind the run
    runner.gate.set()
    await first
    started = time.monotonic()
    await second
    assert time.monotonic() - started < 1.0  # counted from now, it would wait 1 s more (a lower bound)
    await batcher.stop()
    executor.shutdown()
