"""The batching policy as a plain structure (service.batchqueue): which waiting items make the next batch."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from inference.runtime.graphs import ATTENTION, FAST, BatchKind
from inference.scheduling.batchqueue import BatchQueue, fill


@dataclass(eq=False)
class Item:
    kind: BatchKind
    length: int


def test_queue_takes_oldest_then_nearest_lengths_within_caps() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    items = [Item(FAST, n) for n in (2, 30, 3, 31, 2, 30)]
    queue.push(items)
    batches = []
    while len(queue):
        batches.append([i.length for i in queue.next_batch(max_size=4, max_tokens=64)])
    # oldest first, then nearest lengths: short inputs never pad up to the long ones (budget 64, size 4)
    assert batches == [[2, 2, 3], [30, 30], [31]]


def test_queue_size_and_token_caps_and_kinds() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    queue.push([Item(FAST, 2) for _ in range(6)] + [Item(FAST, 40), Item(FAST, 40), Item(ATTENTION, 2)])
    batches = [queue.next_batch(4, 64) for _ in range(5)]
    assert [[i.length for i in b] for b in batches] == [[2, 2, 2, 2], [2, 2], [40], [40], [2]]
    assert {i.kind for i in batches[4]} == {ATTENTION} and len(queue) == 0 and queue.next_batch(4, 64) == []


def test_queue_remove_reports_whether_the_item_was_still_waiting() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    a, b = Item(FAST, 3), Item(FAST, 3)
    queue.push([a, b])
    assert queue.remove(a) and not queue.remove(a)
    assert queue.next_batch(4, 64) == [b] and not queue.remove(b)


def test_fill_reads_candidates_no_further_than_the_batch_fills() -> None:
    """The queue's candidates may be computed lazily (the fair queue sorts other callers' inputs only when
    the chosen caller's leave room): a batch full by size, or by tokens, reads no more of them."""
    read: list[int] = []

    def candidates(lengths: list[int]) -> Iterator[Item]:
        for n in lengths:
            read.append(n)
            yield Item(FAST, n)

    assert [i.length for i in fill(Item(FAST, 4), candidates([4, 4, 4, 4]), 3, 1_000)] == [4, 4, 4]
    assert read == [4, 4]
    read.clear()  # by tokens: 4 x 8 = 32 is the budget; no input, however short, makes a fifth fit
    assert [i.length for i in fill(Item(FAST, 8), candidates([8, 50, 2, 8, 1]), 64, 32)] == [8, 8, 2, 8]
    assert read == [8, 50, 2, 8]
    read.clear()  # room left at the end: every candidate is read
    assert len(fill(Item(FAST, 8), candidates([8, 8]), 64, 1_000)) == 3 and read == [8, 8]
