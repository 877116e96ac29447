"""Thread pools for bulk work, whose threads run at a lower CPU priority than the rest of the server, and the
run slots that the graph threads of both priorities share.

When every core is busy, a runnable thread waits its turn for one. Under a saturating bulk load the event
loop, runnable, waited on the run queue for a core (docs/reliability.md measures how long), and an
interactive request passes through the loop several times. So bulk graph runs and the tokenising of bulk
requests run in threads niced by `bulk_nice` (Linux keeps a nice value per thread): the kernel gives the
event loop, the interactive lane and interactive tokenising a core first whenever they are runnable, and a
niced thread still runs at full speed whenever nothing else wants the core.

A niced thread still keeps its core for the rest of its time slice when a normal thread wakes (Linux's
EEVDF scheduler lets the running thread reach its slice's end first), and an interactive request wakes the
loop and the lane several times. Under the SCHED_IDLE policy (`bulk_idle_policy`) a bulk thread gives the
core up as soon as a normal thread wakes, and otherwise runs as before. onnxruntime's own intra-op worker
threads (intra_op_threads > 1) serve every run and keep the normal priority and policy.

The graph threads of the two priorities hold one of `graph_runs` shared slots while a graph runs
(`SharedSlots`), so that with several models served no more runs overlap than the sessions' threads were
sized for, whichever class each batch is of (the interactive lane's one run is the exception, by design).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


def background_pool(workers: int, prefix: str, nice: int, idle: bool = False) -> ThreadPoolExecutor:
    """A pool whose threads each lower their own CPU priority by `nice` when they start (0: unchanged), and with
    `idle` (and `nice` above 0) take the SCHED_IDLE policy too."""
    return ThreadPoolExecutor(workers, thread_name_prefix=prefix, initializer=lower_priority, initargs=(nice, idle))


def lower_priority(nice: int, idle: bool = False) -> None:
    """Raise this thread's nice value by `nice` (at most to 19), and with `idle` put it under SCHED_IDLE. Linux
    only: elsewhere a nice value is the whole process's, so the thread is left as it is."""
    if not nice or sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + nice))
    except OSError as error:  # raising a nice value needs no privilege; a sandbox may refuse it all the same
        log.warning("bulk threads keep the normal CPU priority: %s", error)
        return
    if idle:
        try:  # lowering the policy needs no privilege either
            os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
        except OSError as error:
            log.warning("bulk threads keep the normal scheduling policy (niced only): %s", error)


class SharedSlots(Executor):
    """Runs calls on `pool`, each holding one of `slots` (a semaphore other pools share) while it runs."""

    def __init__(self, pool: ThreadPoolExecutor, slots: threading.Semaphore) -> None:
        self._pool, self._slots = pool, slots

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        def held() -> T:
            with self._slots:
                return fn(*args, **kwargs)

        return self._pool.submit(held)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait, cancel_futures=cancel_futures)
