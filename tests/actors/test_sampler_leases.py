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


def _half_full_loop(first_k: int, rest_k: int, **kw):
    """Item 1 (first_k samples) finishes at the first engine step, item 2 (rest_k) runs on; the scorer
    holds item 1's report at its gate until the test opens it. Capacity 16: asks from 4 samples of room."""
    from ada_ray.actors.sampler_loop import SamplerLoop
    from ada_ray.rewards import SafeScorer
    from tests.actors.fakes import GatedScorer
    from tests.actors.loops import LOOPS

    q = ScriptedQueue([[item(1, k=first_k, prompt=(1,)), item(2, k=rest_k, prompt=(2,))], [item(3, k=4, prompt=(1,))]])
    engine = FakeEngine(first_j_right(), steps_for=lambda p: 1 if p == (1,) else 1000)
    scorer = GatedScorer(SafeScorer("exact"))
    loop = SamplerLoop("s0", engine, q, scorer, 16, **kw)
    loop.idle_sampling_s = loop.idle_paused_s = loop.feeder.poll_s = 0.001
    loop.feeder.empty_backoff_s = 60.0
    LOOPS.append(loop)
    loop.sampling = True
    for _ in range(5):  # leases items 1 and 2, steps: item 1 finishes, its report waits at the gate
        tick(loop, 1, flush=False)
        if scorer.entered.wait(0.2):
            break
    assert scorer.entered.is_set() and len(engine.added) == 2
    return q, engine, scorer, loop


def test_an_ask_rides_the_report_while_the_engine_is_at_least_half_full():
    q, engine, scorer, loop = _half_full_loop(4, 12)  # 12 of 16 still in the engine, 4 of room: an ask is due
    time.sleep(0.05)
    assert len(q.lease_calls) == 1  # the feeder leaves it to the report coming
    scorer.gate.set()
    wait_until(lambda: len(q.lease_calls) == 2)
    assert q.lease_calls[1] == ("s0", 1_000_000, 4, 0.5) and [iid for iid, _ in q.reports] == [1]
    assert loop.stats()["lease_calls"] == 1  # the ask went with the report: no lease call of its own
    tick(loop, 1)
    assert [a[0] for a in engine.added] == ["w1", "w2", "w3"]  # the ridden answer's item went to the engine
    assert loop.stats()["asks_on_reports"] >= 1 and loop.stats()["leased_items"] == 3


def test_the_feeder_asks_by_itself_when_the_engine_is_under_half_full():
    q, engine, scorer, loop = _half_full_loop(12, 4)  # 4 of 16 in the engine: waiting for a report would starve it
    wait_until(lambda: len(q.lease_calls) == 2)
    assert q.lease_calls[1] == ("s0", 1_000_000, 12, 0.5) and q.reports == []  # a long poll, before the report
    assert loop.stats()["asks_on_reports"] == 0
    scorer.gate.set()
    loop.reports.flush(2.0)


def test_asks_never_ride_reports_when_switched_off():
    q, engine, scorer, loop = _half_full_loop(4, 12, asks_ride_reports=False)
    wait_until(lambda: len(q.lease_calls) == 2)
    assert q.lease_calls[1] == ("s0", 1_000_000, 4, 0.5) and q.reports == []
    scorer.gate.set()
    loop.reports.flush(2.0)
    assert loop.stats()["asks_on_reports"] == 0


def test_a_report_that_fails_leaves_the_feeder_alive_and_the_loop_dies_of_the_report():
    q, engine, scorer, loop = _half_full_loop(4, 12)
    q.report_error = RuntimeError("scheduler refused the report")
    scorer.gate.set()
    wait_until(lambda: loop.reports.error is not None)
    assert loop.feeder.error is None  # the ridden ask's failure is the report's, not the feeder's
    loop.run()  # returns when the loop dies
    assert "report pipeline failed" in loop.error and "scheduler refused" in loop.error
