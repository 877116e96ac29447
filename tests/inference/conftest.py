"""The batcher tests' fixture: a started batcher over a FakeRunner, one run slot, caps small enough to hit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest_asyncio

from inference.scheduling.batcher import Batcher
from inference.scheduling.work import BatchLimits
from tests.helpers.batching import FakeRunner


@pytest_asyncio.fixture(loop_scope="function")
async def setup():
    runner = FakeRunner()
    executor = ThreadPoolExecutor(1)
    limits = BatchLimits(max_batch_tokens=64, max_batch_size=4, max_queue=8, queue_timeout_s=5.0, bulk_queue=4)
    batcher = Batcher(runner, limits, executor)
    batcher.start()
    yield batcher, runner
    runner.gate.set()
    await batcher.stop()
    executor.shutdown()
