"""Batcher with a fake runner: batching, caps, admission, timeouts, failures, cancellation, drain."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import pytest_asyncio

from service.batcher import Batcher, BatchLimits
from service.errors import InferenceFailed, NotReady, Overloaded, QueueTimeout


class FakeRunner:
    """Records each batch; answers each input with its length; may fail or block."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail = False
        self.short = False
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, kind: str, seqs: list[np.ndarray]) -> list[tuple[str, int]]:
        self.gate.wait(5)
        self.batches.append([len(s) for s in seqs])
        if self.fail:
            raise RuntimeError("boom: /secret/path")
        out = [(kind, len(s)) for s in seqs]
        return out[:-1] if self.short else out


def seq(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


@pytest_asyncio.fixture(loop_scope="function")
async def setup():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    limits = BatchLimits(max_batch_tokens=64, max_batch_size=4, max_queue=8, queue_timeout_s=5.0)
    batcher = Batcher(runner, limits, executor)
    batcher.start()
    yield batcher, runner
    runner.gate.set()
    await batcher.stop()
    executor.shutdown()


async def submit(batcher: Batcher, lengths: list[int], kind: str = "fast"):
    with batcher.admit(len(lengths)) as ticket:
        return await batcher.submit(ticket, kind, [seq(n) for n in lengths])


async def test_results_come_back_in_order(setup):
    batcher, _ = setup
    assert await submit(batcher, [3, 1, 2]) == [("fast", 3), ("fast", 1), ("fast", 2)]


async def test_concurrent_submits_form_one_batch(setup):
    batcher, runner = setup
    batcher.pause()
    tasks = [asyncio.create_task(submit(batcher, [5])) for _ in range(4)]
    await asyncio.sleep(0.01)
    batcher.resume()
    assert await asyncio.gather(*tasks) == [[("fast", 5)]] * 4
    assert runner.batches == [[5, 5, 5, 5]]


async def test_size_and_token_caps_hold(setup):
    batcher, runner = setup
    batcher.pause()
    small = asyncio.create_task(submit(batcher, [2] * 6))  # size cap 4 -> 2 batches
    big = asyncio.create_task(submit(batcher, [40, 40]))  # 2 x 40 > 64 tokens -> one each
    await asyncio.sleep(0.01)
    batcher.resume()
    await asyncio.gather(small, big)
    assert all(len(b) <= 4 and max(b) * len(b) <= 64 for b in runner.batches)
    assert sorted(x for b in runner.batches for x in b) == sorted([2] * 6 + [40, 40])


async def test_lengths_are_grouped_to_cut_padding(setup):
    batcher, runner = setup
    batcher.pause()
    tasks = [asyncio.create_task(submit(batcher, [n])) for n in (2, 30, 3, 31, 2, 30)]
    await asyncio.sleep(0.01)
    batcher.resume()
    await asyncio.gather(*tasks)
    # oldest first, then nearest lengths: short inputs never pad up to the long ones (budget 64, size 4)
    assert sorted(sorted(b) for b in runner.batches) == [[2, 2, 3], [30, 30], [31]]


async def test_different_kinds_never_share_a_batch(setup):
    batcher, runner = setup
    batcher.pause()
    a = asyncio.create_task(submit(batcher, [3, 4], "fast"))
    b = asyncio.create_task(submit(batcher, [3], "attention"))
    await asyncio.sleep(0.01)
    batcher.resume()
    assert await b == [("attention", 3)]
    await a
    assert len(runner.batches) == 2


async def test_full_queue_refuses_whole_request_at_once(setup):
    batcher, _ = setup
    batcher.pause()
    held = asyncio.create_task(submit(batcher, [1] * 6))
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded) as refused:
        batcher.admit(3)  # 6 + 3 > 8: none of the 3 is admitted
    assert refused.value.headers()["Retry-After"]
    assert batcher.in_flight == 6
    batcher.admit(2).__exit__()  # 8 fits; unused permits come back
    batcher.resume()
    await held
    assert batcher.in_flight == 0


async def test_queue_timeout_fails_and_does_not_run(setup):
    batcher, runner = setup
    batcher.limits.queue_timeout_s = 0.05
    batcher.pause()
    with pytest.raises(QueueTimeout):
        await submit(batcher, [4, 4])
    batcher.resume()
    await asyncio.sleep(0.02)
    assert runner.batches == [] and batcher.in_flight == 0 and batcher.depth == 0


async def test_failing_runner_reaches_every_waiter_and_batcher_goes_on(setup):
    batcher, runner = setup
    runner.fail = True
    batcher.pause()
    tasks = [asyncio.create_task(submit(batcher, [3])) for _ in range(3)]
    await asyncio.sleep(0.01)
    batcher.resume()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, InferenceFailed) for r in results)
    assert "secret" not in str(results[0])
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
    batcher.pause()
    gone = asyncio.create_task(submit(batcher, [7, 7]))
    kept = asyncio.create_task(submit(batcher, [3]))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.sleep(0.01)
    batcher.resume()
    assert await kept == [("fast", 3)]
    assert runner.batches == [[3]]
    assert batcher.in_flight == 0


async def test_stop_drains_admitted_work_and_refuses_new():
    runner = FakeRunner()
    runner.gate.clear()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0), executor)
    batcher.start()
    tasks = [asyncio.create_task(submit(batcher, [2])) for _ in range(6)]
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.01)
    with pytest.raises(NotReady):
        batcher.admit(1)
    runner.gate.set()
    await stopping
    assert await asyncio.gather(*tasks) == [[("fast", 2)]] * 6
    executor.shutdown()


async def test_batch_wait_gathers_late_arrivals_then_flushes():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    batcher = Batcher(runner, BatchLimits(64, 4, 16, 5.0, batch_wait_s=0.1), executor)
    batcher.start()
    first = asyncio.create_task(submit(batcher, [3]))
    await asyncio.sleep(0.02)
    second = asyncio.create_task(submit(batcher, [3]))
    assert await asyncio.gather(first, second) == [[("fast", 3)]] * 2
    assert runner.batches == [[3, 3]]  # one run; the not-full batch still ran after the wait
    await batcher.stop()
    executor.shutdown()
