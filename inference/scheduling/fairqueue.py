"""Priority classes and fair shares in the batch queue: which waiting inputs head the next batch.

Every input belongs to a `Caller`: a priority class, interactive or bulk, and a fairness key (the caller's
name). The queue keeps the inputs of each class in a `BatchQueue` and chooses the next batch's head in two
steps, each by start-time fair queueing over padded tokens (batch size x longest input: what a graph run's
time grows with, known when the batch is formed, so no clock is needed):

1. the class: interactive weighted 1 - bulk_share, bulk weighted bulk_share;
2. the caller within that class: equal weights, so two bulk callers share the bulk time by tokens.

The head is the chosen caller's oldest input; the batch is filled as `BatchQueue` fills one (same kind,
nearest lengths, under the caps) from that caller's inputs first, then, while room is left, from the other
callers of its class (many interactive callers' single texts still share a batch); a batch never mixes
classes. The class is charged the
batch's padded tokens, each caller in it its inputs' share (its inputs x the batch's longest).

Start-time fair queueing: each key has a finish tag; the virtual time is the start tag of the key chosen
last; a key's start tag is the later of its finish tag and the virtual time (time idle earns no credit); the
waiting key with the lowest start tag is chosen (ties: interactive first, then the caller whose input has
waited longest) and its finish tag moves to its start tag + cost / weight. One exception makes interactive
the first class: bulk inputs that start waiting (none of bulk was waiting) start no earlier than
interactive's finish tag, so they never take a turn ahead of interactive inputs on arriving; they earn
their share only while both classes wait. So an interactive input goes ahead of queued bulk inputs (a bulk
batch moves bulk's tag cost / 0.2 ahead, an interactive one cost / 0.8), while bulk keeps bulk_share of the
padded tokens when both classes keep the queue busy, and never starves.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from inference.runtime.graphs import BatchKind
from inference.scheduling.batchqueue import BatchQueue, fill, nearest

Priority = Literal["interactive", "bulk"]
PRIORITIES: tuple[Priority, ...] = ("interactive", "bulk")  # also the order of ties


@dataclass(frozen=True)
class Caller:
    """Whose an input is: its priority class, and the name it is shared fairly under (the caller's)."""

    name: str = ""
    priority: Priority = "interactive"


ANYONE = Caller()  # the anonymous interactive caller: requests of a server that asks for no key, and warm-up


class FairItem(Protocol):
    kind: BatchKind
    caller: Caller

    @property
    def length(self) -> int: ...


F = TypeVar("F", bound=FairItem)
K = TypeVar("K", bound=Hashable)


def _later(compute: Callable[[], list[F]]) -> Iterator[F]:
    """`compute()`'s items, computed when first read."""
    yield from compute()


class Shares(Generic[K]):
    """Start-time fair queueing over keys with weights (module docstring). No clock: costs are charged."""

    def __init__(self, weight: Callable[[K], float]) -> None:
        self._weight = weight
        self._finish: dict[K, float] = {}
        self._now = 0.0  # virtual time: the start tag of the key chosen last

    def start(self, key: K) -> float:
        return max(self._finish.get(key, 0.0), self._now)

    def choose(self, waiting: Sequence[K]) -> K:
        """The waiting key with the lowest start tag; the first of them in `waiting` on a tie."""
        key = min(waiting, key=self.start)
        self._now = self.start(key)
        self._finish = {k: f for k, f in self._finish.items() if f > self._now}  # the rest start at now anyway
        return key

    def charge(self, key: K, cost: float) -> None:
        self._finish[key] = self.start(key) + cost / self._weight(key)

    def wake(self, key: K, behind: K) -> None:
        """`key` starts waiting: it starts no earlier than `behind`'s finish tag (it takes no turn before `behind`
        has had the turn its share gives it now)."""
        self._finish[key] = max(self.start(key), self._finish.get(behind, 0.0))


class FairQueue(Generic[F]):
    """The waiting inputs of every class and caller, and the choice of the next batch (module docstring). A
    plain structure: no event loop, no clock."""

    def __init__(self, bulk_share: float = 0.2) -> None:
        if not 0 < bulk_share < 1:
            raise ValueError(f"bulk_share must be between 0 and 1, not {bulk_share}")
        weights = {"interactive": 1 - bulk_share, "bulk": bulk_share}
        self._classes: dict[Priority, BatchQueue[F]] = {p: BatchQueue() for p in PRIORITIES}
        self._class_shares: Shares[Priority] = Shares(weights.__getitem__)
        self._caller_shares: dict[Priority, Shares[Caller]] = {p: Shares(lambda c: 1.0) for p in PRIORITIES}
        self._callers: dict[Caller, dict[int, F]] = {}  # each caller's waiting items, in arrival order
        self._arrival: dict[int, int] = {}  # id(item) -> its place in the arrival order
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._arrival)

    def push(self, items: Sequence[F]) -> None:
        for item in items:
            if item.caller.priority == "bulk" and not len(self._classes["bulk"]):
                self._class_shares.wake("bulk", behind="interactive")
            self._classes[item.caller.priority].push([item])
            self._callers.setdefault(item.caller, {})[id(item)] = item
            self._arrival[id(item)] = next(self._counter)

    def oldest(self) -> F | None:
        """The item that has waited longest, whatever its class."""
        heads = [h for q in self._classes.values() if (h := q.oldest()) is not None]
        return min(heads, key=lambda item: self._arrival[id(item)], default=None)

    def remove(self, item: F) -> bool:
        """Take `item` out if it is still waiting; False when it already left (taken or removed)."""
        if not self._classes[item.caller.priority].remove(item):
            return False
        self._forget(item)
        return True

    def waiting(self, name: str) -> int:
        """Inputs waiting of the callers called `name` (in any class)."""
        return sum(len(items) for caller, items in self._callers.items() if caller.name == name)

    def waiting_in(self, priority: Priority) -> int:
        return len(self._classes[priority])

    def next_batch(self, max_size: int, max_tokens: int, only: Priority | None = None) -> list[F]:
        """A batch of one class (`only`, when given), headed by the oldest input of the caller the fair shares
        choose."""
        classes = [p for p in PRIORITIES if len(self._classes[p]) and only in (None, p)]
        if not classes:
            return []
        priority = self._class_shares.choose(classes)
        callers = sorted((c for c in self._callers if c.priority == priority), key=self._first_arrival)
        caller = self._caller_shares[priority].choose(callers)
        own = list(self._callers[caller].values())

        def others() -> list[F]:  # read and sorted only when the caller's own inputs leave room in the batch
            return nearest(own[0], [item for item in self._classes[priority].items() if item.caller != caller])

        batch = fill(own[0], itertools.chain(nearest(own[0], own), _later(others)), max_size, max_tokens)
        for item in batch:
            self._classes[priority].remove(item)
            self._forget(item)
        self._charge(priority, batch)
        return batch

    def _first_arrival(self, caller: Caller) -> int:
        return self._arrival[next(iter(self._callers[caller]))]

    def _charge(self, priority: Priority, batch: list[F]) -> None:
        longest = max(item.length for item in batch)
        self._class_shares.charge(priority, longest * len(batch))
        for caller, count in Counter(item.caller for item in batch).items():
            self._caller_shares[priority].charge(caller, longest * count)

    def _forget(self, item: F) -> None:
        del self._arrival[id(item)]
        items = self._callers[item.caller]
        del items[id(item)]
        if not items:
            del self._callers[item.caller]
