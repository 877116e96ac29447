"""Admission, counted in inputs and capped per priority class: a request of N inputs takes N permits at once
or is refused whole (`Overloaded`, 429). At most `max_queue` inputs are admitted at once (queued, tokenising
or running), and of them at most `bulk_queue` of the bulk class, so bulk callers alone can never fill the
queue that interactive calls need. A plain structure: no event loop, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from inference.errors import Overloaded, TooManyInputs
from inference.scheduling.fairqueue import Caller, Priority


class Permits:
    def __init__(self, max_queue: int, bulk_queue: int, changed: Callable[[str, int], None]) -> None:
        self.max_queue, self.bulk_queue = max_queue, min(bulk_queue, max_queue)
        self._changed = changed  # (caller name, its inputs admitted now): the metrics' in-flight gauge
        self._held: Counter[Caller] = Counter()
        self.total = self.bulk = 0

    def cap(self, priority: Priority) -> int:
        return self.bulk_queue if priority == "bulk" else self.max_queue

    def full(self, priority: Priority = "interactive") -> bool:
        """No permit is free for this class: any request of it would be refused."""
        return self.total >= self.max_queue or (priority == "bulk" and self.bulk >= self.bulk_queue)

    def take(self, n: int, caller: Caller) -> None:
        """n permits for `caller`, or TooManyInputs (never fits) or Overloaded (does not fit now)."""
        cap, setting = self.cap(caller.priority), _setting(caller.priority)
        if n > cap:
            raise TooManyInputs(f"{n} inputs exceed the {caller.priority} queue size of {cap} ({setting})")
        held = self.bulk if caller.priority == "bulk" else self.total
        if held + n > cap or self.total + n > self.max_queue:
            raise Overloaded(f"server busy: {held} {caller.priority} inputs admitted, limit {cap} ({setting})")
        self._move(caller, n)

    def give_back(self, n: int, caller: Caller) -> None:
        if n:
            self._move(caller, -n)

    def held_by(self, name: str) -> int:
        return sum(count for caller, count in self._held.items() if caller.name == name)

    def _move(self, caller: Caller, n: int) -> None:
        self.total += n
        self.bulk += n if caller.priority == "bulk" else 0
        self._held[caller] += n
        if not self._held[caller]:
            del self._held[caller]
        self._changed(caller.name, self.held_by(caller.name))


def _setting(priority: Priority) -> str:
    return "ATTNSERVE_BULK_QUEUE_SHARE of ATTNSERVE_MAX_QUEUE" if priority == "bulk" else "ATTNSERVE_MAX_QUEUE"


class Ticket:
    """Permits taken by one request; those not turned into queued items are returned on exit. After a
    submit, `queue_s` is the longest wait of its inputs and `inference_s` the span of the graph runs that
    carried them (first start to last end)."""

    def __init__(self, permits: Permits, n: int, caller: Caller) -> None:
        self._permits, self.unused, self.caller = permits, n, caller
        self.queue_s = self.inference_s = 0.0

    def take(self, n: int) -> None:
        if n > self.unused:
            raise ValueError(f"ticket holds {self.unused} permits, {n} needed")
        self.unused -= n

    def give_back(self, n: int) -> None:
        """Return n permits now (inputs answered without queueing)."""
        self.take(n)
        self._permits.give_back(n, self.caller)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self._permits.give_back(self.unused, self.caller)
        self.unused = 0
