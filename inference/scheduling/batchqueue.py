"""The batching policy on its own: the waiting items in arrival order, and which of them make the next
batch (the oldest, then same-kind items of the nearest lengths, under a size cap and a token budget).
A plain structure with no event loop and no clock, shared by the served models' batcher and the corpus job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from inference.runtime.graphs import BatchKind


class Queued(Protocol):
    kind: BatchKind

    @property
    def length(self) -> int: ...


Q = TypeVar("Q", bound=Queued)


class BatchQueue(Generic[Q]):
    """The waiting items in arrival order, and the choice of the next batch. A plain structure: no
    event loop, no clock, so the batching policy is tested on its own."""

    def __init__(self) -> None:
        self._items: dict[int, Q] = {}  # insertion order = arrival order

    def __len__(self) -> int:
        return len(self._items)

    def push(self, items: Sequence[Q]) -> None:
        for item in items:
            self._items[id(item)] = item

    def oldest(self) -> Q | None:
        """The item that has waited longest, if any."""
        return next(iter(self._items.values()), None)

    def remove(self, item: Q) -> bool:
        """Take `item` out if it is still waiting; False when it already left (taken or removed)."""
        return self._items.pop(id(item), None) is not None

    def items(self) -> list[Q]:
        """The waiting items, oldest first."""
        return list(self._items.values())

    def next_batch(self, max_size: int, max_tokens: int, head: Q | None = None) -> list[Q]:
        """`head` (default: the oldest item), then same-kind items closest to it in length (less padding),
        while the batch stays within `max_size` items and `max_tokens` (items x longest, padding counted)."""
        head = self.oldest() if head is None else head
        if head is None:
            return []
        batch = fill(head, nearest(head, self._items.values()), max_size, max_tokens)
        for item in batch:
            del self._items[id(item)]
        return batch


def nearest(head: Q, items: Iterable[Q]) -> list[Q]:
    """The items of head's kind but head, nearest in length first (ties: in the order given)."""
    others = [i for i in items if i.kind == head.kind and i is not head]
    others.sort(key=lambda i: abs(i.length - head.length))
    return others


def fill(head: Q, candidates: Iterable[Q], max_size: int, max_tokens: int) -> list[Q]:
    """`head`, then each candidate in turn that keeps the batch within `max_size` items and `max_tokens`
    (items x longest, padding counted). Reads `candidates` no further than the batch fills, so a lazy
    iterable is computed only as far as needed."""
    batch, longest = [head], head.length
    candidates = iter(candidates)
    while len(batch) < max_size and longest * (len(batch) + 1) <= max_tokens:  # one more could still fit
        item = next(candidates, None)
        if item is None:
            break
        if max(longest, item.length) * (len(batch) + 1) <= max_tokens:
            batch.append(item)
            longest = max(longest, item.length)
    return batch
