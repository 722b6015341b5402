"""The sampler loop with a fake engine and a fake queue (no Ray, no vLLM, milliseconds): leasing,
generation, scoring, reports, the stop signal, weight updates, reward errors, loop death, eval.
Scoring and reporting run on the report pipeline's thread: `tick` waits for it (flush) after its
ticks, so each test reads what the queue received."""

from __future__ import annotations

import inspect
import subprocess
import sys
import time

import pytest

from ada_ray.actors.sampler_loop import LoopDied
from ada_ray.algo.scheduler import SchedulerError, WorkScheduler
from ada_ray.algo.types import Prompt, Signal
from ada_ray.config import AlgoConfig
from ada_ray.engines.protocol import Engine
from ada_ray.engines.vllm_engine import VLLMEngine
from tests.actors.fakes import FakeEngine, SchedulerQueue, ScriptedQueue
from tests.actors.loops import first_j_right, item, make_loop, tick, wait_until


def test_vllm_engine_and_the_fake_satisfy_the_engine_protocol():
    assert issubclass(VLLMEngine, Engine) and isinstance(FakeEngine(), Engine)
    verbs = [n for n, v in vars(Engine).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert {"add", "step", "has_unfinished", "abort_all", "receive_weights"} <= set(verbs)
    for name in verbs:
        want = list(inspect.signature(getattr(Engine, name)).parameters)
        assert list(inspect.signature(getattr(VLLMEngine, name)).parameters) == want, name


def test_the_loop_imports_no_ray_and_no_vllm():
    code = ("import sys, ada_ray.actors.sampler_loop; "
            "sys.exit(any(m.split('.')[0] in ('ray', 'vllm') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_leases_generates_scores_and_reports_each_item():
    q = ScriptedQueue([[item(1, k=2), item(2, k=3, round_=1)]])
    engine = FakeEngine(first_j_right(1))
    loop = make_loop(q, engine)
    loop.sampling = True
    tick(loop, 3)  # lease call; items into the engine and one step; the reports go out
    assert [(rid, n, seed) for rid, _, n, seed, *_ in engine.added] == [("w1", 2, 101), ("w2", 3, 102)]
    assert [iid for iid, _ in q.reports] == [1, 2]
    s1, s2 = q.reports[0][1], q.reports[1][1]
    assert [s.reward for s in s1] == [1.0, 0.0] and [s.reward for s in s2] == [1.0, 0.0, 0.0]
    assert s1[0].prompt_id == "p1" and s1[0].text == "ok" and s1[0].completion_ids == [ord("o"), ord("k")]
    assert s1[0].behaviour_logprobs == [-0.5, -0.5] and s2[0].round == 1 and not s1[0].reward_error
    st = loop.stats()
    assert (st["items"], st["samples"], st["tokens"], st["inflight_samples"]) == (2, 5, 10, 0)


def test_one_lease_in_flight_asking_for_the_room_left():
    q = ScriptedQueue([[item(1, k=5)]])
    loop = make_loop(q, FakeEngine(steps=10), capacity=8)
    tick(loop, 3)
    assert q.lease_calls == []  # not sampling: no leases
    loop.sampling = True
    q.hold_leases = True
    tick(loop, 3)
    assert q.lease_calls == [("s0", 1_000_000, 8, 0.5)]  # one call, held by the queue; the loop ticks on
    q.hold_leases = False
    q.lease_refs[0].ready = True
    wait_until(lambda: loop.feeder.held == 5)
    tick(loop, 2)
    assert q.lease_calls[1] == ("s0", 1_000_000, 3, 0.5)  # 5 of 8 in flight: it asks for the room left
    assert loop.inflight_samples == 5 and len(q.lease_calls) == 2  # the empty answer is not re-asked at once


def test_a_paused_loop_waits_instead_of_spinning():
    q = ScriptedQueue()
    loop = make_loop(q)
    loop.sampling = True
    tick(loop, 1)  # a lease call; its (empty) answer is back at once
    loop.pause()
    loop.idle_paused_s = 0.01
    t0 = time.monotonic()
    tick(loop, 5)
    assert time.monotonic() - t0 >= 0.045 and q.wait_calls == 1  # five idle waits; the lease waited on once
    assert len(q.lease_calls) == 1


def test_stop_signal_ends_leasing_and_in_flight_work_still_reports():
    q = ScriptedQueue([[item(1)], Signal.STOP])
    loop = make_loop(q, FakeEngine(first_j_right(), steps=3))
    loop.sampling = True
    tick(loop, 8)
    assert not loop.sampling and len(q.lease_calls) == 2
    assert [iid for iid, _ in q.reports] == [1]


def test_update_mid_generation_keeps_each_item_at_its_start_version():
    q = ScriptedQueue([[item(1)], [item(2)]])
    engine = FakeEngine(first_j_right(), steps=3)
    loop = make_loop(q, engine, capacity=2)  # item 2 is leased when item 1 has finished
    loop.sampling = True
    tick(loop, 2)  # item 1 runs under version 0
    fut = loop.update_weights({"version": 1})
    tick(loop, 1)
    assert fut.result(timeout=0) == 1 and engine.versions == [1] and loop.version == 1
    tick(loop, 6)
    by_item = {iid: {s.version for s in samples} for iid, samples in q.reports}
    assert by_item == {1: {0}, 2: {1}}
    assert engine.aborts == 0  # a good update drops nothing


def test_failed_update_drops_in_flight_work_and_pauses_until_a_good_one():
    q = ScriptedQueue([[item(1)], [item(2)]])
    engine = FakeEngine(first_j_right(), steps=3)
    loop = make_loop(q, engine, capacity=2)  # item 2 is not in the engine when the update fails
    loop.sampling = True
    tick(loop, 2)
    engine.fail_updates = True
    fut = loop.update_weights({"version": 1})
    tick(loop, 1)
    with pytest.raises(RuntimeError, match="broadcast broke"):
        fut.result(timeout=0)
    assert engine.aborts == 1 and loop.items == {} and loop.inflight_samples == 0 and loop.version == 0
    calls = len(q.lease_calls)
    tick(loop, 5)
    assert len(q.lease_calls) == calls and q.reports == [] and engine.running == {}  # nothing runs
    engine.fail_updates = False
    loop.update_weights({"version": 2})
    tick(loop, 6)
    assert [(iid, samples[0].version) for iid, samples in q.reports] == [(2, 2)]  # item 1 is never reported


def test_engine_is_not_stepped_while_the_weights_are_half_loaded():
    engine = FakeEngine(first_j_right())
    loop = make_loop(ScriptedQueue(), engine)
    engine.fail_updates = True
    loop.update_weights({"version": 1})
    tick(loop, 1)
    done = loop.evaluate([[1]], ["ok"], 2, 1.0, [0])
    tick(loop, 3)
    assert not done.done() and loop.stats()["steps"] == 0
    engine.fail_updates = False
    loop.update_weights({"version": 2})
    tick(loop, 2)
    assert done.result(timeout=0)["correct"] == [1]


def test_reward_function_that_raises_scores_zero_and_is_counted():
    q = ScriptedQueue([[item(1, k=3)]])
    loop = make_loop(q, reward="tests.rewards.plugins:raises")
    loop.sampling = True
    tick(loop, 4)
    (_, samples), = q.reports
    assert [(s.reward, s.reward_error) for s in samples] == [(0.0, True)] * 3
    assert loop.stats()["reward_errors"] == 3 and loop.error is None


def test_scheduler_error_in_a_report_kills_the_loop_and_every_caller_sees_it():
    q = ScriptedQueue([[item(1)]])
    q.report_error = SchedulerError("reported 1 samples for item 1, which asked for 2")
    loop = make_loop(q)
    loop.sampling = True
    loop.run()  # returns when the loop dies
    assert "asked for 2" in loop.error
    with pytest.raises(LoopDied):
        loop.check_alive()
    with pytest.raises(LoopDied):
        loop.submit(lambda: None)


def test_evaluate_counts_correct_samples_per_prompt_at_the_current_version():
    engine = FakeEngine(lambda prompt, seed, j: "ok" if j < prompt[0] else "no")
    loop = make_loop(ScriptedQueue(), engine, version=3)
    done = loop.evaluate([[1], [3]], ["ok", "ok"], 4, 0.6, [7, 8], max_tokens=5)
    tick(loop, 2)
    assert done.result(timeout=0) == {"correct": [1, 3], "errors": 0, "version": 3}
    assert [(n, seed, t, m) for _, _, n, seed, t, m in engine.added] == [(4, 7, 0.6, 5), (4, 8, 0.6, 5)]
    empty = loop.evaluate([], [], 4, 0.6, [])
    tick(loop, 1)
    assert empty.result(timeout=0) == {"correct": [], "errors": 0, "version": 3} and loop.eval_batches == {}


def test_evaluation_in_flight_fails_when_the_loop_dies():
    engine = FakeEngine(steps=5)
    loop = make_loop(ScriptedQueue(), engine)
    done = loop.evaluate([[1]], ["ok"], 2, 1.0, [0])
    tick(loop, 1)
    engine.step_error = RuntimeError("engine crashed")
    loop.run()
    with pytest.raises(LoopDied, match="engine crashed"):
        done.result(timeout=0)


def test_a_cohort_completes_through_the_real_scheduler():
    prompts = [Prompt(f"q{i}", f"q{i}", (i + 1,), "ok", "2x1") for i in range(2)]
    sched = WorkScheduler(prompts, AlgoConfig(name="ada_seq_balance", n=4, samples_per_round=4, max_rounds=3),
                          batch_prompts=2, max_staleness=0)
    # prompt (1,) is always right (rounds until the cap), (2,) half right (exits in round 0)
    engine = FakeEngine(lambda prompt, seed, j: "ok" if prompt[0] == 1 or j % 2 else "no")
    q = SchedulerQueue(sched)
    loop = make_loop(q, engine, capacity=16)
    loop.feeder.empty_backoff_s = 0.005  # the fake answers at once where the queue would hold the call
    loop.sampling = True
    for _ in range(50):
        tick(loop, 1)
        if sched.cohort_status(0) == Signal.READY:
            break
    res = sched.take_cohort(0)
    rounds = {g.prompt_id: g.rounds for g in res.groups}
    assert rounds == {"q0": 3, "q1": 1}
    assert all(s.version == 0 for g in res.groups for s in g.samples)
    q.stopped = True
    tick(loop, 2)
    acct = sched.check_accounting()
    assert acct["items_ok"] and acct["completed"] == 4
