"""Dynamic batching: one asyncio task owns the queue and turns waiting inputs into graph runs.

Every input of a request is one `WorkItem` of the request's `Caller` (priority class and fairness key).
Admission is counted in inputs, per class (`inference.scheduling.admission`): a request of N inputs takes N permits at
once or is refused (`Overloaded`, 429). Whenever an input waits and one of the `runs_in_flight` run slots is
free, the worker task asks the fair queue (`inference.scheduling.fairqueue`: interactive ahead of bulk, bulk keeping
its share, callers of a class sharing by tokens) for a batch: its head, then same-kind inputs of its class
and the nearest lengths (less padding) under the token budget (batch size x longest sequence) and the size
cap (with several slots free, the waiting inputs are shared out among them, so one large request keeps
every slot busy); it runs the graph in an executor thread and fans the per-input results back out while the
other slots run.
A graph run cannot be interrupted, so while every slot runs a bulk batch, an interactive batch runs at once
beside them in one more slot kept for it (the interactive lane), instead of waiting for a bulk batch to end.
Bulk batches run in threads of their own, at a lower CPU priority (`inference.scheduling.slots`). Inputs of a model's
different LoRA adapters share batches: each item carries its adapter index, and the run gets one per row
(`inference.runtime.graphs`). A failed batch fails every waiter in it; a request that waits past the queue timeout
fails with `QueueTimeout` and is not run; a cancelled request (client gone) is dropped before it costs
compute. On stop, admitted work is drained before the task ends.

A request that finds the batcher idle (no input waits, a run slot free, or for an interactive request the lane
while every slot runs a bulk batch) and whose inputs make one batch under the caps runs at once, skipping the queue:
the batch the worker would form from it alone, started as the worker starts it (run slots, threads, lane, accounting),
a few event-loop turns sooner; with `batch_wait_s` set it waits for partners as before (the operator's choice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from inference.errors import NotReady, QueueTimeout
from inference.runtime.graphs import BatchKind, Input
from inference.scheduling.admission import Permits, Ticket
from inference.scheduling.fairqueue import ANYONE, Caller, FairQueue, Priority
from inference.scheduling.observer import BatchObserver
from inference.scheduling.runs import RunFn, execute, fail
from inference.scheduling.work import BatcherStats, BatchLimits, WorkItem

log = logging.getLogger(__name__)

class Batcher:
    def __init__(
        self, run: RunFn, limits: BatchLimits, executor: Executor | None = None,
        observer: BatchObserver | None = None, lane: Executor | None = None, bulk: Executor | None = None,
    ) -> None:
        self._run_fn, self.limits, self._executor = run, limits, executor
        self._lane = lane or executor  # the interactive lane's thread: only its batches run there
        self._bulk = bulk or executor  # bulk batches' threads (a lower CPU priority)
        self._observer = observer or BatchObserver()
        self._queue: FairQueue[WorkItem] = FairQueue(limits.bulk_share)
        self._permits = Permits(limits.max_queue, limits.bulk_queue or limits.max_queue, self._observer.in_flight)
        self._wake = asyncio.Event()
        self._stopping = False
        self._draining = False  # batches run at once, without batch_wait_s: shutdown has begun
        self._task: asyncio.Task[None] | None = None
        self._running: dict[asyncio.Task[None], Priority] = {}  # each run and the class of its batch
        self.last_ok = True
        self.stats = BatcherStats()
        self.at_once = True  # the idle path (module docstring); False: every input queues (bench.lone's baseline)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="attnserve-batcher")

    def drain(self) -> None:
        """Shutdown has begun (the server stopped accepting): run what waits at once instead of waiting out
        batch_wait_s for partners that will not come. Admission stays open until `stop`."""
        self._draining = True
        self._wake.set()

    async def stop(self) -> None:
        """Refuse new work, finish what was admitted, then end the worker task."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task
        while self._running:  # runs started at once after the worker ended (admitted before stop)
            await asyncio.wait(list(self._running))

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        return self._permits.total

    @property
    def full(self) -> bool:
        """No permit is free for interactive requests (nor, then, for bulk ones)."""
        return self._permits.full("interactive")

    def full_for(self, priority: Priority) -> bool:
        """No permit is free for this class: any request of it would be refused (the edge refuses it before
        reading its body)."""
        return self._permits.full(priority)

    # -- admission and submission ------------------------------------------------------------------
    def admit(self, n: int, caller: Caller = ANYONE) -> Ticket:
        """Take n permits of the caller's class at once, or refuse the whole request."""
        if self._stopping:
            raise NotReady("the server is shutting down")
        self._permits.take(n, caller)
        return Ticket(self._permits, n, caller)

    async def submit(
        self, ticket: Ticket, kind: BatchKind, sequences: Sequence[Input], urgent: bool = False,
        adapter: int = 0,
    ) -> list[Any]:
        """Queue one item per sequence (the ticket's caller's, run with `adapter`), or on an idle batcher start
        them at once (module docstring), and wait for all results, in order. `urgent` items do not wait for batch
        partners (batch_wait_s) when they are the oldest waiting."""
        loop = asyncio.get_running_loop()
        ticket.take(len(sequences))
        items = [WorkItem(kind, sequence, loop.create_future(), ticket.caller, urgent=urgent, adapter=adapter)
                 for sequence in sequences]
        timer = None  # the queue timeout's: an input run at once never waits in the queue
        if self._idle_for(items):
            self._run_at_once(items)
        else:
            timer = self._enqueue(items)
        try:
            results = [await items[0].future] if len(items) == 1 else list(
                await asyncio.gather(*(item.future for item in items)))
        finally:
            if timer is not None:
                timer.cancel()
            self._abandon(items)
        ticket.queue_s = max(item.ran_at - item.enqueued_at for item in items)
        ticket.inference_s = max(item.done_at for item in items) - min(item.ran_at for item in items)
        return results

    def _enqueue(self, items: list[WorkItem]) -> asyncio.TimerHandle:
        """Queue `items` for the worker; the timer that fails them once they waited past the queue timeout."""
        self._queue.push(items)
        self._observer.queue_depth(items[0].caller.name, self._queue.waiting(items[0].caller.name))
        self._wake.set()
        self.stats.queued += len(items)
        return asyncio.get_running_loop().call_later(self.limits.queue_timeout_s, self._expire, items)

    def _idle_for(self, items: list[WorkItem]) -> bool:
        """Whether the worker, handed `items` now, would run them at once as one batch: no input waits (nor
        would wait out batch_wait_s), a run slot is free (or the lane, for an interactive request while every
        slot runs a bulk batch), and the items are not shared out among slots nor cut by the caps."""
        if not self.at_once or (self.limits.batch_wait_s and not (self._draining or items[0].urgent)):
            return False
        free = self.limits.runs_in_flight - len(self._running)
        lane = items[0].caller.priority == "interactive" and not self._queue.waiting_in("interactive")
        if (self.depth > 0) if free > 0 else not (lane and self._only_lane_free()):
            return False
        n = len(items)
        return n == 1 or (free <= 1 and n <= self.limits.max_batch_size
                          and max(item.length for item in items) * n <= self.limits.max_batch_tokens)

    def _run_at_once(self, items: list[WorkItem]) -> None:
        """Start `items` as one batch now, as the worker starts a batch it took (never queued: no timer)."""
        self._start(items)
        self.stats.at_once += len(items)
        name = items[0].caller.name
        self._observer.ran_at_once(name, len(items))
        self._observer.queue_depth(name, self._queue.waiting(name))  # unchanged; the caller's series exists from now

    def _expire(self, items: list[WorkItem]) -> None:
        for item in items:
            if self._unqueue(item) and not item.future.done():
                waited = self.limits.queue_timeout_s
                item.future.set_exception(
                    QueueTimeout(f"request waited more than {waited:g} s in the queue (ATTNSERVE_QUEUE_TIMEOUT_S)")
                )

    def _abandon(self, items: list[WorkItem]) -> None:
        for item in items:
            if not item.future.done():
                item.future.cancel()
            self._unqueue(item)

    def _unqueue(self, item: WorkItem) -> bool:
        if not self._queue.remove(item):
            return False
        self._permits.give_back(1, item.caller)
        self._observer.queue_depth(item.caller.name, self._queue.waiting(item.caller.name))
        return True

    def _release_items(self, items: list[WorkItem]) -> None:
        for caller, n in Counter(item.caller for item in items).items():
            self._permits.give_back(n, caller)

    # -- the worker --------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while await self._wait_for_work():
            try:
                batches = self._take_batches()
            except Exception:  # a bug here must not kill the only worker
                log.exception("batcher iteration failed")
                continue
            for batch in batches:
                self._start(batch)
        if self._running:
            await asyncio.wait(self._running)  # drained: every admitted input has its answer

    def _start(self, batch: list[WorkItem]) -> None:
        """Run `batch` in a task of its own, holding a run slot (the lane's when none is free) until it ends."""
        run = asyncio.get_running_loop().create_task(self._run(batch, self._executor_for(batch)))
        self._running[run] = batch[0].caller.priority
        run.add_done_callback(self._ran)

    def _executor_for(self, batch: list[WorkItem]) -> Executor | None:
        if len(self._running) >= self.limits.runs_in_flight:  # every slot taken: the lane's (interactive) batch
            return self._lane
        return self._bulk if batch[0].caller.priority == "bulk" else self._executor

    def _ran(self, run: asyncio.Task[None]) -> None:
        if self._running.pop(run, None) is not None:  # cancelled before `_run` freed it
            self._wake.set()  # a slot is free
        if not run.cancelled() and run.exception() is not None:
            log.error("batch run failed", exc_info=run.exception())

    def _only_lane_free(self) -> bool:
        """Every run slot holds a bulk batch and the interactive lane is free (for one interactive batch)."""
        return (self.limits.interactive_lane and len(self._running) == self.limits.runs_in_flight
                and all(p == "bulk" for p in self._running.values()))

    async def _wait_for_work(self) -> bool:
        """Until an input waits and a run slot (or the interactive lane, for an interactive input) is free;
        False once stopping with nothing left to take."""
        while not self.depth or (len(self._running) >= self.limits.runs_in_flight
                                 and not (self._only_lane_free() and self._queue.waiting_in("interactive"))):
            if self._stopping and not self.depth:
                return False
            self._wake.clear()
            await self._wake.wait()
        if self.limits.batch_wait_s and not self._draining:
            await self._gather(self.limits.batch_wait_s)
        return True

    async def _gather(self, seconds: float) -> None:
        """Wait for more inputs until the oldest waiting input has waited `seconds`, unless the batch fills (or
        stop begins) first. Counted from that input's arrival, not from now: inputs left over when a batch
        was shared out among run slots, or queued behind a long run, have waited already and run at once
        (counted from now, n inputs shared out among 2 slots waited about log2(n) times `seconds`)."""
        oldest = self._queue.oldest()
        if oldest is None or oldest.urgent:
            return
        deadline = oldest.enqueued_at + seconds  # time.monotonic(), as enqueued_at
        while self.depth < self.limits.max_batch_size and not (self._stopping or self._draining) and (
            left := deadline - time.monotonic()
        ) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def _take_batches(self) -> list[list[WorkItem]]:
        """A batch for each free run slot, the waiting inputs shared out among them, all taken at once: an
        input left for a later slot would otherwise wait out batch_wait_s again. No slot free: an interactive
        batch for the lane."""
        free = self.limits.runs_in_flight - len(self._running)
        if free <= 0:
            lane = self._queue.next_batch(self.limits.max_batch_size, self.limits.max_batch_tokens, "interactive")
            return [lane] if lane else []
        size = min(self.limits.max_batch_size, -(-self.depth // free))
        batches = []
        for _ in range(free):
            batch = self._queue.next_batch(size, self.limits.max_batch_tokens)
            if not batch:
                break
            batches.append(batch)
        for name in {item.caller.name for batch in batches for item in batch}:
            self._observer.queue_depth(name, self._queue.waiting(name))
        return batches

    async def _run(self, batch: list[WorkItem], executor: Executor | None) -> None:
        """Answer `batch`, then free its slot at once, in the same turn of the event loop: a waiter it answered
        that submits again finds the slot free (the task's done callbacks run a turn later). The worker is woken
        only when inputs wait for the slot: after a lone request's run it would wake to find nothing to do."""
        try:
            await self._answer(batch, executor)
        finally:
            if self._running.pop(asyncio.current_task(), None) is not None and self.depth:  # type: ignore[arg-type]
                self._wake.set()

    async def _answer(self, batch: list[WorkItem], executor: Executor | None) -> None:
        live = [item for item in batch if not item.future.done()]  # clients gone: skip
        self._release_items([item for item in batch if item.future.done()])
        if not live:
            return
        try:
            outputs = await execute(live, executor, self._run_fn, self._observer)
        except Exception as exc:
            self.last_ok = False
            fail(live, exc)
        else:
            self.last_ok = True
            for item, output in zip(live, outputs, strict=True):
                if not item.future.done():
                    item.future.set_result(output)
        finally:
            self._release_items(live)
