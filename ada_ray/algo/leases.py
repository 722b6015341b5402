"""The lease table: which sampler holds which work item, until when, and the item accounting.

A leased item belongs to one sampler until it reports, its lease expires, or the sampler is
released (dead). The table hands expired and released items back to the scheduler, which queues
the work again as a new item. It owns the item counters of ARCHITECTURE invariant 3:
issued = completed + reissued + cancelled + outstanding (`balanced`); a report for an item whose
lease had already ended is counted in `late_reports` and changes nothing else. Pure, no Ray.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple, Optional

from ada_ray.algo.types import WorkItem


@dataclass
class ItemCounts:
    """The work-item counters (the first five keys of a checkpoint's "accounting")."""

    issued: int = 0
    completed: int = 0
    reissued: int = 0
    cancelled: int = 0
    late_reports: int = 0  # reports for items whose lease had already ended


class Lease(NamedTuple):
    """One per leased item (a tuple: made for every item the queue hands out)."""

    item: WorkItem
    sampler_id: str
    deadline: float


class LeaseTable:
    def __init__(self, timeout_s: float, counts: Optional[ItemCounts] = None):
        self.timeout_s = timeout_s
        self.counts = counts or ItemCounts()
        self._leases: dict[int, Lease] = {}  # item_id -> lease, in the order they were granted (= deadline order)
        self._last_deadline = float("-inf")
        self.in_deadline_order = True  # False once a caller's clock went back: expire then scans every lease

    def __len__(self) -> int:
        return len(self._leases)

    def items(self) -> list[WorkItem]:
        """The leased items, oldest lease first."""
        return [lease.item for lease in self._leases.values()]

    def grant(self, item: WorkItem, sampler_id: str, now: float) -> None:
        self.in_deadline_order &= now + self.timeout_s >= self._last_deadline
        self._last_deadline = now + self.timeout_s
        self._leases[item.item_id] = Lease(item, sampler_id, now + self.timeout_s)
        self.counts.issued += 1

    def _end(self, item_ids: list[int]) -> list[WorkItem]:
        """End these leases; their items go out again (counted as reissued)."""
        self.counts.reissued += len(item_ids)
        return [self._leases.pop(iid).item for iid in item_ids]

    def expire(self, now: float) -> list[WorkItem]:
        """End every lease whose deadline has passed; the items to hand out again. Leases are granted
        with one timeout at a clock that does not go back, so the table is in deadline order: the scan
        stops at the first live lease (a lease call costs O(expired), not O(outstanding))."""
        if not self.in_deadline_order:
            return self._end([iid for iid, lease in self._leases.items() if lease.deadline < now])
        dead = []
        for iid, lease in self._leases.items():
            if lease.deadline >= now:
                break
            dead.append(iid)
        return self._end(dead)

    def release(self, sampler_id: str) -> list[WorkItem]:
        """A sampler died: end its leases (only its own); the items to hand out again."""
        return self._end([iid for iid, lease in self._leases.items() if lease.sampler_id == sampler_id])

    def holders(self) -> dict[str, int]:
        """Items leased per sampler id (a stall's first question: who holds the work)."""
        out: dict[str, int] = {}
        for lease in self._leases.values():
            out[lease.sampler_id] = out.get(lease.sampler_id, 0) + 1
        return out

    def lookup(self, item_id: int) -> Optional[WorkItem]:
        """The item a report names, or None (counted as a late report) when its lease has ended."""
        lease = self._leases.get(item_id)
        if lease is None:
            self.counts.late_reports += 1
            return None
        return lease.item

    def complete(self, item_id: int) -> WorkItem:
        """The item's report was accepted: its lease ends, the work is done."""
        self.counts.completed += 1
        return self._leases.pop(item_id).item

    def cancel(self, item_ids: list[int]) -> None:
        """These items' work is no longer wanted (their prompt starts over): their leases end, counted
        as cancelled; a late report for one changes nothing."""
        for iid in item_ids:
            del self._leases[iid]
        self.counts.cancelled += len(item_ids)

    def find(self, cohort: int, prompt_id: str) -> list[int]:
        """The ids of the leased items of this prompt in this cohort."""
        return [iid for iid, lease in self._leases.items()
                if lease.item.cohort == cohort and lease.item.prompt_id == prompt_id]

    def cancel_all(self) -> None:
        """End of run: every outstanding lease is cancelled."""
        self.counts.cancelled += len(self._leases)
        self._leases.clear()

    def balanced(self) -> bool:
        c = self.counts
        return c.issued == c.completed + c.reissued + c.cancelled + len(self._leases)

    def counts_as_saved(self) -> ItemCounts:
        """The counters a checkpoint records: leases die with this process, so each open lease is
        counted as reissued (its work is saved as not yet done and goes out again on resume)."""
        return dataclasses.replace(self.counts, reissued=self.counts.reissued + len(self._leases))
