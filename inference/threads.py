"""Thread pools for bulk work, whose threads run at a lower CPU priority than the rest of the server.

When every core is busy, a runnable thread waits its turn for one. Under a saturating bulk load on 2 cores
the event loop waited 4-5 ms at a time on the run queue (its /proc/thread-self/schedstat wait, with almost no
CPU spent meanwhile), and an interactive request passes through the loop several times. So bulk graph runs
and the tokenising of bulk requests run in threads niced by `bulk_nice` (Linux keeps a nice value per
thread): the kernel gives the event loop, the interactive lane and interactive tokenising a core first
whenever they are runnable, and a niced thread still runs at full speed whenever nothing else wants the core.
onnxruntime's own intra-op worker threads (intra_op_threads > 1) serve every run and keep the normal priority.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


def background_pool(workers: int, prefix: str, nice: int) -> ThreadPoolExecutor:
    """A pool whose threads each lower their own CPU priority by `nice` when they start (0: unchanged)."""
    return ThreadPoolExecutor(workers, thread_name_prefix=prefix, initializer=lower_priority, initargs=(nice,))


def lower_priority(nice: int) -> None:
    """Raise this thread's nice value by `nice` (at most to 19). Linux only: elsewhere a nice value is the whole
    process's, so the thread is left as it is."""
    if not nice or sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + nice))
    except OSError as error:  # raising a nice value needs no privilege; a sandbox may refuse it all the same
        log.warning("bulk threads keep the normal CPU priority: %s", error)
