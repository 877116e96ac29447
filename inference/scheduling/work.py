"""What the batcher works on: one queued input (`WorkItem`: its sequence, its future, who asked, when) and the
limits its batches are formed within (`BatchLimits`, from the caller's `BatchOptions`)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from inference.options import BatchOptions
from inference.runtime.graphs import BatchKind, Input
from inference.scheduling.fairqueue import ANYONE, Caller


@dataclass(eq=False)
class WorkItem:
    kind: BatchKind
    sequence: Input
    future: asyncio.Future[Any]
    caller: Caller = ANYONE
    enqueued_at: float = field(default_factory=time.monotonic)
    ran_at: float = 0.0  # its graph run started
    done_at: float = 0.0  # its graph run ended
    urgent: bool = False  # its batch runs without waiting batch_wait_s (warm-up, readiness probes)
    adapter: int = 0  # its LoRA adapter's index (0: the bare base): rows of different adapters share a batch
    length: int = field(init=False)  # tokens: read for every waiting input each time a batch is formed

    def __post_init__(self) -> None:
        self.length = len(self.sequence)


@dataclass
class BatchLimits:
    max_batch_tokens: int
    max_batch_size: int
    max_queue: int
    queue_timeout_s: float
    batch_wait_s: float = 0.0
    runs_in_flight: int = 1
    bulk_share: float = 0.2  # of the graph time, while both classes wait
    bulk_queue: int | None = None  # most permits bulk inputs hold at once; None: max_queue
    interactive_lane: bool = False  # one more run, for an interactive batch while every slot runs a bulk one

    @classmethod
    def of(cls, options: BatchOptions, runs_in_flight: int) -> BatchLimits:
        bulk_queue = max(1, int(options.max_queue * options.bulk_queue_share))
        return cls(options.max_batch_tokens, options.max_batch_size, options.max_queue, options.queue_timeout_s,
                   options.batch_wait_ms / 1000, runs_in_flight, options.bulk_share, bulk_queue,
                   options.interactive_lane)


@dataclass
class BatcherStats:
    """Inputs started at once on an idle batcher (`at_once`) and inputs queued for the worker (`queued`)."""

    at_once: int = 0
    queued: int = 0
