"""The work items ready to lease, in the scheduler's work order: `ReadyQueue`.

Order: the oldest cohort first; inside a cohort, the next round of a prompt already in flight before
a new prompt's first round; then first queued, first out. Cohorts and the in-flight/new split make
only a few *lanes* (two a cohort open under admission control), and inside a lane the order is
arrival order, so each lane is a FIFO deque and the queue keeps its lanes' keys sorted: a push and a
pop cost O(1) (plus O(lanes) when a lane opens or empties), where one heap of every ready item cost
O(log n) comparisons of tuples - at 16k prompts a cohort and three cohorts open, a lease's heap pops
were the largest part of the queue's lease. Pure, no Ray.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Callable, Iterator

from ada_ray.algo.types import WorkItem


class ReadyQueue:
    """Ready work items; `pop` gives them in work order (module docstring)."""

    __slots__ = ("_lanes", "_keys", "_n")

    def __init__(self):
        self._lanes: dict[tuple[int, int], deque[WorkItem]] = {}
        self._keys: list[tuple[int, int]] = []  # the lanes' keys, sorted: _keys[0] is served first
        self._n = 0

    def push(self, item: WorkItem) -> None:
        key = (item.cohort, 0 if item.round > 0 else 1)  # a next round of a prompt in flight (0) before a new prompt (1)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            bisect.insort(self._keys, key)
        lane.append(item)
        self._n += 1

    def peek(self) -> WorkItem:
        """The item `pop` would give (IndexError when empty)."""
        return self._lanes[self._keys[0]][0]

    def pop(self) -> WorkItem:
        key = self._keys[0]  # IndexError when empty
        lane = self._lanes[key]
        item = lane.popleft()
        if not lane:
            del self._lanes[key]
            del self._keys[0]
        self._n -= 1
        return item

    def remove_if(self, drop: Callable[[WorkItem], bool]) -> list[WorkItem]:
        """Take out every item `drop` says to (the others keep their order); the items taken out."""
        out: list[WorkItem] = []
        for key in list(self._keys):
            lane = self._lanes[key]
            kept = deque()
            for item in lane:
                (out if drop(item) else kept).append(item)
            if kept:
                self._lanes[key] = kept
            else:
                del self._lanes[key]
                self._keys.remove(key)
        self._n -= len(out)
        return out

    def clear(self) -> None:
        self._lanes.clear()
        self._keys.clear()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[WorkItem]:
        """Every ready item, in work order (nothing is taken out)."""
        for key in self._keys:
            yield from self._lanes[key]

    def __repr__(self) -> str:
        return f"ReadyQueue({self._n} items in {len(self._keys)} lanes)"
