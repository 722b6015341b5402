"""Leasing off the engine's loop thread (sampler_leases.py), through the loop with a fake engine
and a fake queue: the engine steps on while the queue holds a lease call, an empty answer is not
re-asked in a spin, and a lease the queue never answers ends the loop with a named error."""

from __future__ import annotations

import time

from tests.actors.fakes import FakeEngine, ScriptedQueue
from tests.actors.loops import first_j_right, item, make_loop, tick, wait_until


def test_the_engine_steps_on_while_the_queue_holds_a_lease_call():
    q = ScriptedQueue([[item(1)], [item(2)]])
    q.hold_leases = True
    engine = FakeEngine(first_j_right(), steps=4)
    loop = make_loop(q, engine, capacity=4)
    loop.sampling = True
    tick(loop, 1)
    q.lease_refs[0].ready = True  # item 1 comes back; the next call (room 2) stays with the queue
    wait_until(lambda: len(q.lease_calls) == 2)
    t0 = time.monotonic()
    tick(loop, 5)
    assert engine.stepped == 4 and [iid for iid, _ in q.reports] == [1]  # generated and reported meanwhile
    assert time.monotonic() - t0 < 1.0 and len(q.lease_calls) == 2  # no tick waited for the held call
    q.lease_refs[1].ready = True
    wait_until(lambda: loop.feeder.held == 2)
    tick(loop, 6)
    assert [iid for iid, _ in q.reports] == [1, 2]


def test_an_empty_answer_is_not_asked_again_in_a_spin():
    q = ScriptedQueue()
    loop = make_loop(q)
    loop.feeder.empty_backoff_s = 0.05
    loop.sampling = True
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        loop.tick()
    assert 2 <= len(q.lease_calls) <= 10 and loop.stats()["empty_leases"] == len(q.lease_calls)


def test_a_lease_the_queue_never_answers_ends_the_loop_by_name():
    q = ScriptedQueue([[item(1)]])
    q.hold_leases = True
    loop = make_loop(q)
    loop.feeder.answer_timeout_s = 0.05
    loop.feeder.lease_wait_s = 0.0
    loop.sampling = True
    loop.run()  # returns when the loop dies
    assert "lease feeder failed" in loop.error and "unanswered after 0.05s" in loop.error


def test_a_sliver_of_room_is_not_leased():
    q = ScriptedQueue([[item(1, k=13)], [item(2, k=1)]])
    engine = FakeEngine(first_j_right(), steps=2)
    loop = make_loop(q, engine, capacity=16)  # a quarter of it: 4 samples
    loop.sampling = True
    tick(loop, 2)
    assert len(q.lease_calls) == 1 and loop.inflight_samples == 13  # 3 samples of room: no call
    tick(loop, 2)  # item 1 finishes: 16 free
    assert q.lease_calls[1] == ("s0", 1_000_000, 16, 0.5)
