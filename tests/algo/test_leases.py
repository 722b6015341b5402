"""The lease table: grant, expire, release, report lookup, and the item counters."""

import pytest

from ada_ray.algo.leases import ItemCounts, LeaseTable
from ada_ray.algo.types import WorkItem


def item(item_id, prompt_id="p"):
    return WorkItem(item_id, prompt_id, (1, 2), "a", 4, 0, 0, 7, 0)


def test_grant_then_expire_after_the_deadline_only():
    t = LeaseTable(timeout_s=10.0)
    t.grant(item(1), "s0", now=0.0)
    t.grant(item(2), "s0", now=5.0)
    assert t.expire(10.0) == []  # the deadline itself is still inside the lease
    assert t.expire(10.5) == [item(1)]
    assert t.items() == [item(2)] and len(t) == 1
    assert t.counts == ItemCounts(issued=2, reissued=1)
    assert t.balanced()


def test_release_hands_back_only_that_samplers_items_in_grant_order():
    t = LeaseTable(timeout_s=10.0)
    for iid, sampler in ((1, "dead"), (2, "alive"), (3, "dead")):
        t.grant(item(iid), sampler, now=0.0)
    assert t.holders() == {"dead": 2, "alive": 1}
    assert [it.item_id for it in t.release("dead")] == [1, 3]
    assert t.holders() == {"alive": 1}
    assert [it.item_id for it in t.items()] == [2]
    assert t.release("dead") == []
    assert t.counts == ItemCounts(issued=3, reissued=2)


def test_report_lookup_keeps_the_lease_until_complete_and_counts_late_reports():
    t = LeaseTable(timeout_s=10.0)
    t.grant(item(1), "s0", now=0.0)
    assert t.lookup(1) == item(1) and len(t) == 1  # looking up does not end the lease
    assert t.complete(1) == item(1) and len(t) == 0
    assert t.lookup(1) is None  # its lease has ended: a late report
    assert t.lookup(99) is None  # never leased
    assert t.counts == ItemCounts(issued=1, completed=1, late_reports=2)
    assert t.balanced()


def test_cancel_all_and_the_invariant():
    t = LeaseTable(timeout_s=1.0)
    for iid in range(1, 5):
        t.grant(item(iid), "s0", now=0.0)
    t.complete(1)
    t.expire(2.0)  # items 2..4 go out again
    t.grant(item(5), "s1", now=2.0)
    assert t.balanced()  # 5 issued = 1 completed + 3 reissued + 0 cancelled + 1 outstanding
    t.cancel_all()
    assert len(t) == 0 and t.counts == ItemCounts(issued=5, completed=1, reissued=3, cancelled=1)
    assert t.balanced()
    t.counts.completed += 1  # a count out of step with the table breaks the invariant
    assert not t.balanced()


def test_saved_counts_treat_open_leases_as_reissued_without_changing_the_live_ones():
    t = LeaseTable(timeout_s=10.0, counts=ItemCounts(issued=3, completed=3))
    t.grant(item(4), "s0", now=0.0)
    t.grant(item(5), "s0", now=0.0)
    assert t.counts_as_saved() == ItemCounts(issued=5, completed=3, reissued=2)
    assert t.counts == ItemCounts(issued=5, completed=3)
    # what a resumed table starts from balances with no leases open
    assert LeaseTable(10.0, t.counts_as_saved()).balanced()


def test_expiry_stops_at_the_first_live_lease_and_survives_a_clock_that_goes_back():
    t = LeaseTable(timeout_s=10.0)
    for iid, now in ((1, 0.0), (2, 1.0), (3, 2.0)):
        t.grant(item(iid), "s0", now=now)
    assert t.in_deadline_order
    assert [it.item_id for it in t.expire(11.5)] == [1, 2]
    t.grant(item(4), "s0", now=0.5)  # a caller's clock went back: deadline 10.5, before item 3's 12.0
    assert not t.in_deadline_order
    assert [it.item_id for it in t.expire(11.0)] == [4]  # found behind a live lease: the full scan
    assert [it.item_id for it in t.expire(12.5)] == [3]
    assert t.balanced() and t.counts == ItemCounts(issued=4, reissued=4)


def test_a_work_items_copy_with_changes_equals_dataclasses_replace_and_stays_frozen():
    """The scheduler copies every item it leases or re-issues with WorkItem.but (not dataclasses.replace)."""
    import dataclasses
    import pickle

    w = WorkItem(1, "p", (1, 2, 3), "a", 8, 0, 0, 5, 0)
    b = w.but(version=3, item_id=9)
    assert b == dataclasses.replace(w, version=3, item_id=9) and hash(b) == hash(dataclasses.replace(b))
    assert w.version == 0 and w.item_id == 1  # the original is untouched
    assert pickle.loads(pickle.dumps(b)) == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.version = 4
