"""Token budgets per caller: a bucket of `tokens_per_minute` tokens that refills continuously (tpm / 60 a
second, up to a minute's worth). A request is let in while its caller's bucket holds more than 0; the
tokens it used (every input's, special tokens included, as `usage` counts them) are taken out when it is
answered, so the bucket may go below 0 (a large request is never refused for its size alone) and the caller
then waits until it is above 0 again: `retry_after` is that wait, rounded up to whole seconds, what
Retry-After says.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass
class Bucket:
    per_minute: int
    level: float
    at: float  # the clock reading `level` was taken at

    def now(self, clock: float) -> float:
        """The level at `clock`, refilled since `at` (capped at a minute's worth)."""
        return min(float(self.per_minute), self.level + (clock - self.at) * self.per_minute / 60)


class Budgets:
    """The buckets of the callers that have a budget, by caller name."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, Bucket] = {}

    def update(self, budgets: Iterable[tuple[str, int | None]]) -> None:
        """The budgets in force, (name, tokens per minute or None). A caller whose budget stays keeps its level
        (up to its new size); a new one starts full; one no longer listed, or without a budget, is dropped."""
        now, kept = self._clock(), {}
        for name, per_minute in budgets:
            if per_minute is None:
                continue
            old = self._buckets.get(name)
            level = min(old.now(now), per_minute) if old is not None else float(per_minute)
            kept[name] = Bucket(per_minute, level, now)
        self._buckets = kept

    def retry_after(self, name: str) -> int | None:
        """None while `name` may send (no budget, or its bucket holds more than 0); else the whole seconds until
        it holds more than 0 again."""
        bucket = self._buckets.get(name)
        if bucket is None:
            return None
        level = bucket.now(self._clock())
        if level > 0:
            return None
        return math.floor(-level * 60 / bucket.per_minute) + 1

    def spend(self, name: str, tokens: int) -> None:
        bucket = self._buckets.get(name)
        if bucket is not None and tokens:
            now = self._clock()
            bucket.level, bucket.at = bucket.now(now) - tokens, now
