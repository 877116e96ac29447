"""One batch's graph run, as the batcher starts it in a run slot: the inputs' queue waits and the batch's shape
reported, the graph run in an executor thread (never on the event loop), each input's run and end times set, the
run's time and outcome reported; a failed batch fails every input still waiting in it with one error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from inference.errors import InferenceFailed
from inference.runtime.graphs import BatchKind, Input
from inference.scheduling.observer import BatchObserver
from inference.scheduling.work import WorkItem

log = logging.getLogger("inference.scheduling.batcher")

RunFn = Callable[[BatchKind, list[Input], list[int]], Sequence[Any]]  # (kind, sequences, adapter per row)


async def execute(live: list[WorkItem], executor: Executor | None, run_fn: RunFn,
                  observer: BatchObserver) -> Sequence[Any]:
    """The graph's result for each input of `live` (one batch of one kind), run in `executor`."""
    now = time.monotonic()
    waits: dict[str, list[float]] = {}
    for item in live:
        item.ran_at = now
        waits.setdefault(item.caller.name, []).append(now - item.enqueued_at)
    for name, seconds in waits.items():
        observer.queue_waits(name, seconds)
    lengths, kind = [item.length for item in live], live[0].kind
    observer.batch(kind.graph, len(live), sum(lengths), max(lengths) * len(live))
    loop = asyncio.get_running_loop()
    try:
        outputs = await loop.run_in_executor(executor, run_fn, kind, [i.sequence for i in live],
                                             [i.adapter for i in live])
        if len(outputs) != len(live):
            raise InferenceFailed(f"the graph returned {len(outputs)} results for {len(live)} inputs")
    except Exception:
        observer.inference(kind.graph, time.monotonic() - now, False)
        raise
    done = time.monotonic()
    for item in live:
        item.done_at = done
    observer.inference(kind.graph, done - now, True)
    return outputs


def fail(live: list[WorkItem], exc: Exception) -> None:
    """Every input of `live` not answered yet fails with InferenceFailed; the cause goes to the log only."""
    log.error("batch of %d %s inputs failed", len(live), live[0].kind.graph, exc_info=exc)
    for item in live:
        if not item.future.done():
            item.future.set_exception(InferenceFailed("inference failed for this batch"))
