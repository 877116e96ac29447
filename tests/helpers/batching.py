"""The batcher's fake runner and the helpers its tests share (tests/inference/test_batcher*.py): a runner
that records each batch, answers each input with its length, and may fail or hold its runs at a gate."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import numpy as np

from inference.runtime.graphs import FAST, BatchKind, TokenSequence
from inference.scheduling.batcher import Batcher
from inference.scheduling.fairqueue import ANYONE, Caller
from tests.helpers.serving import until


class FakeRunner:
    """Records each batch; answers each input with its batch kind's name and its length; may fail or block at its
    gate."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail = False
        self.short = False
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = 0
        self.adapters: list[list[int]] = []  # each batch's adapter index per row

    def __call__(
        self, kind: BatchKind, seqs: list[TokenSequence], adapters: Sequence[int] = (),
    ) -> list[tuple[str, int]]:
        self.waiting += 1
        self.gate.wait(5)
        self.waiting -= 1
        self.batches.append([len(s) for s in seqs])
        self.adapters.append(list(adapters))
        if self.fail:
            raise RuntimeError("boom: /secret/path")
        out = [(str(kind), len(s)) for s in seqs]
        return out[:-1] if self.short else out


def seq(n: int) -> TokenSequence:
    return TokenSequence(np.arange(n, dtype=np.int64))



async def submit(batcher: Batcher, lengths: list[int], kind: BatchKind = FAST, caller: Caller = ANYONE):
    with batcher.admit(len(lengths), caller) as ticket:
        return await batcher.submit(ticket, kind, [seq(n) for n in lengths])


@asynccontextmanager
async def plugged(batcher: Batcher, runner: FakeRunner) -> AsyncIterator[None]:
    """A one-input plug (length 1) holds the graph thread; inputs submitted inside queue. The plug's own run is
    removed from runner.batches on exit, so tests see only the batches the queue formed."""
    runner.gate.clear()
    plug = asyncio.create_task(submit(batcher, [1]))
    await until(lambda: runner.waiting == 1)
    try:
        yield
    finally:
        runner.gate.set()
        await plug
        runner.batches.remove([1])

