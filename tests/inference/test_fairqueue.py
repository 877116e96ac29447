"""The fair queue as a plain structure (inference.scheduling.fairqueue): which class and which caller head the next
batch, counted in padded tokens, with no clock; and admission per class (inference.scheduling.admission)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pytest

from inference.errors import Overloaded, TooManyInputs
from inference.runtime.graphs import FAST, BatchKind
from inference.scheduling.admission import Permits
from inference.scheduling.fairqueue import Caller, FairQueue, Shares

SEARCH = Caller("search", "interactive")
BACKFILL = Caller("backfill", "bulk")
REINDEX = Caller("reindex", "bulk")


@dataclass(eq=False)
class Item:
    caller: Caller
    length: int = 8
    kind: BatchKind = FAST


def items(caller: Caller, n: int, length: int = 8) -> list[Item]:
    return [Item(caller, length) for _ in range(n)]


def drain(queue: FairQueue[Item], batches: int, size: int = 1) -> list[list[Item]]:
    return [queue.next_batch(size, 10_000) for _ in range(batches)]


def test_an_interactive_input_goes_ahead_of_queued_bulk_inputs() -> None:
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(BACKFILL, 40))
    first = queue.next_batch(4, 10_000)  # bulk alone: it runs
    query = Item(SEARCH)
    queue.push([query])  # arrives behind 36 waiting bulk inputs
    assert [i.caller for i in first] == [BACKFILL] * 4
    assert queue.next_batch(4, 10_000) == [query]


def test_bulk_keeps_its_share_while_interactive_inputs_keep_the_queue_busy() -> None:
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(SEARCH, 500) + items(BACKFILL, 500))
    taken = Counter(batch[0].caller for batch in drain(queue, 100))
    assert taken == {SEARCH: 80, BACKFILL: 20}  # equal costs: exactly 4 to 1


def test_the_share_is_of_padded_tokens_not_of_batches() -> None:
    queue: FairQueue[Item] = FairQueue(0.5)
    queue.push(items(SEARCH, 300, length=10) + items(BACKFILL, 300, length=30))
    tokens = Counter()
    for batch in drain(queue, 200):
        tokens[batch[0].caller] += batch[0].length
    assert abs(tokens[SEARCH] - tokens[BACKFILL]) <= 30  # within one batch


def test_two_bulk_callers_share_by_tokens_not_by_requests() -> None:
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(BACKFILL, 400, length=10) + items(REINDEX, 400, length=40))
    tokens = Counter()
    for batch in drain(queue, 250):
        tokens[batch[0].caller.name] += batch[0].length
    assert abs(tokens["backfill"] - tokens["reindex"]) <= 40  # within one batch: 4 of backfill's per reindex's


def test_time_idle_earns_no_credit() -> None:
    """Bulk alone for a long while, then interactive arrives: interactive goes first at once, and keeps its
    0.8 from then on (bulk's past use is not a debt; interactive's absence is no credit either)."""
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(BACKFILL, 1000))
    drain(queue, 300)
    queue.push(items(SEARCH, 200))
    taken = [batch[0].caller for batch in drain(queue, 100)]
    assert taken[0] == SEARCH
    assert abs(Counter(taken)[BACKFILL] - 20) <= 1  # 0.2 of the batches, within one


def test_bulk_that_starts_waiting_takes_no_turn_ahead_of_interactive() -> None:
    """Interactive ran, and nothing of bulk waited: bulk arriving now goes behind interactive's next batch (with
    start-time fair queueing alone it would go first, having used nothing lately), then has its share."""
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(SEARCH, 100))
    drain(queue, 3)
    queue.push(items(BACKFILL, 100))
    taken = [batch[0].caller for batch in drain(queue, 10)]
    assert taken[0] == SEARCH and BACKFILL in taken[:2]  # one interactive batch, then bulk's turn comes
    assert Counter(taken)[BACKFILL] == 2


def test_a_batch_is_one_class_the_chosen_callers_inputs_first() -> None:
    other = Caller("other")
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push([Item(SEARCH, 5), *items(BACKFILL, 3, 5), Item(SEARCH, 30), Item(other, 6), Item(other, 5)])
    batch = queue.next_batch(3, 10_000)  # search's own 30 goes before other's 5 and 6, nearer in length
    assert [(i.caller, i.length) for i in batch] == [(SEARCH, 5), (SEARCH, 30), (other, 5)]
    assert {i.caller for i in queue.next_batch(8, 10_000)} == {BACKFILL}  # its share: both classes wait
    assert [(i.caller, i.length) for i in queue.next_batch(8, 10_000)] == [(other, 6)] and len(queue) == 0


def test_a_bulk_caller_with_fewer_requests_gets_whole_batches_of_its_own() -> None:
    """The batch fills with the chosen caller's inputs before another's: else the caller with more waiting
    inputs filled every batch and first come, first served came back through the filling."""
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(BACKFILL, 6 * 64) + items(REINDEX, 2 * 64))
    batches = [queue.next_batch(64, 100_000) for _ in range(4)]
    assert [Counter(i.caller for i in b) for b in batches] == [{BACKFILL: 64}, {REINDEX: 64}] * 2


def test_oldest_remove_and_waiting_by_caller_name() -> None:
    queue: FairQueue[Item] = FairQueue(0.2)
    bulk, query = Item(BACKFILL), Item(SEARCH)
    queue.push([bulk, query, Item(Caller("search", "bulk"))])  # "search" lowered one of its requests to bulk
    assert queue.oldest() is bulk and queue.waiting("search") == 2 and queue.waiting("backfill") == 1
    assert queue.remove(bulk) and not queue.remove(bulk)
    assert queue.oldest() is query and len(queue) == 2


def test_shares_choose_the_lowest_start_tag_and_ties_in_order() -> None:
    shares: Shares[str] = Shares({"a": 0.5, "b": 0.5}.__getitem__)
    assert shares.choose(["a", "b"]) == "a"  # a tie: the first
    shares.charge("a", 10)
    assert shares.choose(["a", "b"]) == "b"
    shares.charge("b", 30)
    assert shares.choose(["a", "b"]) == "a"  # a: 20 (start 0 + 10 / 0.5), b: 60


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1])
def test_bulk_share_must_leave_both_classes_some(share: float) -> None:
    with pytest.raises(ValueError):
        FairQueue(share)


# -- admission per class ------------------------------------------------------------------------------------
def test_bulk_alone_cannot_fill_the_queue_interactive_calls_need() -> None:
    changes: list[tuple[str, int]] = []
    permits = Permits(max_queue=10, bulk_queue=4, changed=lambda name, n: changes.append((name, n)))
    permits.take(3, BACKFILL)
    with pytest.raises(Overloaded, match="bulk"):
        permits.take(2, REINDEX)  # 3 + 2 > 4 bulk permits
    assert permits.full("bulk") is False and permits.total == 3
    permits.take(1, REINDEX)
    assert permits.full("bulk") and not permits.full("interactive")
    permits.take(6, SEARCH)  # the rest is interactive's
    assert permits.full("interactive") and permits.total == 10
    with pytest.raises(TooManyInputs, match="ATTNSERVE_BULK_QUEUE_SHARE"):
        permits.take(5, BACKFILL)  # more than bulk may ever hold: 422, not 429
    permits.give_back(3, BACKFILL)
    assert not permits.full("bulk") and permits.held_by("backfill") == 0
    assert changes[-1] == ("backfill", 0) and ("search", 6) in changes


def test_interactive_is_refused_only_when_the_whole_queue_is_taken() -> None:
    permits = Permits(max_queue=4, bulk_queue=4, changed=lambda name, n: None)
    permits.take(4, BACKFILL)
    with pytest.raises(Overloaded):
        permits.take(1, SEARCH)


def test_other_callers_inputs_are_sorted_only_when_the_chosen_callers_leave_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forming a batch reads every waiting input of the class only when the chosen caller's own do not fill
    it (on the event loop, with 8 bulk callers' 512 inputs waiting, that took about 1 ms a batch)."""
    from inference.scheduling import fairqueue

    sorted_sizes: list[int] = []
    nearest = fairqueue.nearest

    def counted(head: Item, candidates: Iterable[Item]) -> list[Item]:
        found = nearest(head, candidates)
        sorted_sizes.append(len(found))
        return found

    monkeypatch.setattr(fairqueue, "nearest", counted)
    queue: FairQueue[Item] = FairQueue(0.2)
    queue.push(items(BACKFILL, 64) + items(REINDEX, 64))
    assert Counter(i.caller for i in queue.next_batch(32, 100_000)) == {BACKFILL: 32}
    assert sorted_sizes == [63]  # the caller's own (but the head); REINDEX's 64 never sorted
    sorted_sizes.clear()
    queue.push(items(BACKFILL, 1, length=9))
    assert Counter(i.caller for i in queue.next_batch(40, 100_000)) == {REINDEX: 40}
    assert sorted_sizes == [63]
    sorted_sizes.clear()  # room left: the other caller's inputs fill it
    assert Counter(i.caller for i in queue.next_batch(64, 100_000)) == {BACKFILL: 33, REINDEX: 24}
    assert sorted_sizes == [32, 24]
