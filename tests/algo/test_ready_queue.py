"""ReadyQueue: the scheduler's work order (oldest cohort, next rounds before new prompts, FIFO) with
O(1) pushes and pops - the same order the heap of (cohort, new, seq) it replaced gave."""

import heapq
import random

import pytest

from ada_ray.algo.ready_queue import ReadyQueue
from ada_ray.algo.types import WorkItem


def _item(i: int, cohort: int, round_: int) -> WorkItem:
    return WorkItem.make(i, f"p{i}", (1, 2), "a", 4, cohort, round_, 0, 0)


def test_worked_example_oldest_cohort_then_next_rounds_then_arrival():
    q = ReadyQueue()
    for i, (c, r) in enumerate([(1, 0), (0, 0), (1, 2), (0, 1), (0, 0), (0, 3)]):
        q.push(_item(i, c, r))
    # cohort 0: rounds > 0 first (items 3, 5 in arrival order), then new prompts (1, 4); then cohort 1: 2, then 0
    assert [q.pop().item_id for _ in range(len(q))] == [3, 5, 1, 4, 2, 0]
    assert not q and len(q) == 0


def test_same_order_as_the_heap_it_replaced_under_random_pushes_and_pops():
    rng = random.Random(7)
    q, heap, seq = ReadyQueue(), [], 0
    for i in range(5000):
        if heap and rng.random() < 0.45:
            want = heapq.heappop(heap)[3]
            assert q.peek() is want
            assert q.pop() is want
        else:
            it = _item(i, rng.randrange(4), rng.choice([0, 0, 1, 2]))
            seq += 1
            heapq.heappush(heap, (it.cohort, 0 if it.round > 0 else 1, seq, it))
            q.push(it)
        assert len(q) == len(heap)
    assert list(q) == [e[3] for e in sorted(heap)]  # iteration: work order, nothing taken out
    assert len(q) == len(heap)


def test_remove_if_keeps_the_others_in_order_and_empties_lanes():
    q = ReadyQueue()
    items = [_item(i, i % 2, i % 3) for i in range(12)]
    for it in items:
        q.push(it)
    before = list(q)
    gone = q.remove_if(lambda it: it.cohort == 1)
    assert sorted(x.item_id for x in gone) == [1, 3, 5, 7, 9, 11]
    assert list(q) == [it for it in before if it.cohort == 0] and len(q) == 6
    q.push(_item(99, 1, 0))  # an emptied lane opens again
    assert [q.pop().item_id for _ in range(len(q))][-1] == 99


def test_empty_queue_raises_on_pop_and_peek_and_clear_empties():
    q = ReadyQueue()
    with pytest.raises(IndexError):
        q.pop()
    with pytest.raises(IndexError):
        q.peek()
    q.push(_item(1, 0, 0))
    q.clear()
    assert len(q) == 0 and list(q) == [] and not q
