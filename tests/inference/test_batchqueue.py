"""The batching policy as a plain structure (service.batchqueue): which waiting items make the next batch."""

from __future__ import annotations

from dataclasses import dataclass

from inference.batchqueue import BatchQueue


@dataclass(eq=False)
class Item:
    kind: str
    length: int


def test_queue_takes_oldest_then_nearest_lengths_within_caps() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    items = [Item("fast", n) for n in (2, 30, 3, 31, 2, 30)]
    queue.push(items)
    batches = []
    while len(queue):
        batches.append([i.length for i in queue.next_batch(max_size=4, max_tokens=64)])
    # oldest first, then nearest lengths: short inputs never pad up to the long ones (budget 64, size 4)
    assert batches == [[2, 2, 3], [30, 30], [31]]


def test_queue_size_and_token_caps_and_kinds() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    queue.push([Item("fast", 2) for _ in range(6)] + [Item("fast", 40), Item("fast", 40), Item("attention", 2)])
    batches = [queue.next_batch(4, 64) for _ in range(5)]
    assert [[i.length for i in b] for b in batches] == [[2, 2, 2, 2], [2, 2], [40], [40], [2]]
    assert {i.kind for i in batches[4]} == {"attention"} and len(queue) == 0 and queue.next_batch(4, 64) == []


def test_queue_remove_reports_whether_the_item_was_still_waiting() -> None:
    queue: BatchQueue[Item] = BatchQueue()
    a, b = Item("fast", 3), Item("fast", 3)
    queue.push([a, b])
    assert queue.remove(a) and not queue.remove(a)
    assert queue.next_batch(4, 64) == [b] and not queue.remove(b)
