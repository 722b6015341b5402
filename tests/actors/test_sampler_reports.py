"""Scoring and reporting off the engine's loop thread (sampler_reports.py), through the loop with
a fake engine, a fake queue and a scorer held at a gate (a slow verifier): the engine keeps stepping
while scoring lags, reports keep their order and account for every sample, a failing scorer loses
nothing, a stop sends what is still being scored, and leasing waits when scoring falls far behind."""

from __future__ import annotations

import threading
import time

import pytest

from ada_ray.rewards import SafeScorer
from tests.actors.fakes import FakeEngine, GatedScorer, ScriptedQueue
from tests.actors.loops import first_j_right, item, make_loop, tick, wait_until


def gated(error=None):
    return GatedScorer(SafeScorer("exact"), error=error)


def test_the_engine_keeps_stepping_while_a_slow_scorer_scores():
    q = ScriptedQueue([[item(1)], [item(2)], [item(3)]])
    engine = FakeEngine(first_j_right())
    scorer = gated()
    loop = make_loop(q, engine, scorer=scorer, capacity=4)
    loop.sampling = True
    tick(loop, 2, flush=False)  # lease; items 1 and 2 into the engine, one step: they finish
    assert scorer.entered.wait(2.0)  # the verifier is busy with item 1 ...
    tick(loop, 3, flush=False)  # ... while item 3 is leased, generated and handed over
    assert [rid for rid, *_ in engine.added] == ["w1", "w2", "w3"] and engine.stepped == 2
    assert q.reports == [] and loop.stats()["unscored_samples"] == 6
    scorer.gate.set()
    loop.reports.flush(2.0)
    assert [iid for iid, _ in q.reports] == [1, 2, 3]
    assert [[s.reward for s in samples] for _, samples in q.reports] == [[1.0, 0.0]] * 3


def test_reports_keep_the_order_items_finished_in_and_account_for_every_sample():
    # items 1-4 finish after 3, 1, 4, 2 engine steps: in the order 2, 4, 1, 3
    q = ScriptedQueue([[item(i, k=2, prompt=(p,)) for i, p in ((1, 3), (2, 1), (3, 4), (4, 2))]])
    scorer = gated()
    loop = make_loop(q, FakeEngine(first_j_right(2), steps_for=lambda prompt: prompt[0]), scorer=scorer)
    loop.sampling = True
    tick(loop, 2, flush=False)  # all four in the engine (8 samples = capacity); item 2 finishes
    assert scorer.entered.wait(2.0)
    tick(loop, 3, flush=False)  # 4, 1, 3 finish while item 2 is being scored
    scorer.gate.set()
    loop.reports.flush(2.0)
    assert [iid for iid, _ in q.reports] == [2, 4, 1, 3]
    assert scorer.calls == [["ok", "ok"], ["ok", "ok"] * 3]  # the three waiting items in one scorer call
    st = loop.stats()
    assert (st["items"], st["samples"], st["tokens"], st["reward_errors"]) == (4, 8, 16, 0)
    assert st["report_calls"] == 2 and st["unscored_samples"] == 0 and st["inflight_samples"] == 0
    assert all(s.prompt_id == f"p{iid}" and len(samples) == 2 for iid, samples in q.reports for s in samples)


def test_with_a_payload_store_each_pass_puts_one_batch_and_reports_only_metadata():
    from ada_ray.algo.payloads import LocalPayloadStore, fetch_into

    q = ScriptedQueue([[item(1, k=2), item(2, k=3)]])
    store = LocalPayloadStore()
    engine = FakeEngine(first_j_right())
    loop = make_loop(q, engine, payloads=store)
    loop.sampling = True
    tick(loop, 2)
    assert [iid for iid, _ in q.reports] == [1, 2]
    samples = [s for _, ss in q.reports for s in ss]
    assert all(s.remote for s in samples) and len({s.payload[0].key for s in samples}) == 1  # one batch
    assert [s.payload[1] for s in samples] == [0, 1, 2, 3, 4] and store.live == 1
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert fetch_into(store, samples, 1.0) == 5
    assert all(s.completion_ids and len(s.behaviour_logprobs) == len(s.completion_ids) for s in samples)
    assert loop.stats()["payload_batches"] == 1


def test_the_owner_drops_its_batches_once_its_weights_pass_them():
    """A batch of samples started under version 0 (max_staleness 1): kept at weights 1 and 2 (a cohort up
    to 1 may train it, one version of margin), dropped at 3 - and a fetch then says it expired."""
    from ada_ray.algo.payloads import LocalPayloadStore, LostPayloads, fetch_into

    q = ScriptedQueue([[item(1, k=2)]])
    store = LocalPayloadStore()
    loop = make_loop(q, FakeEngine(first_j_right()), payloads=store, max_staleness=1)
    loop.sampling = True
    tick(loop, 2)
    samples = [s for _, ss in q.reports for s in ss]
    assert store.live == 1 and {s.version for s in samples} == {0}
    for v in (1, 2):
        fut = loop.update_weights({"version": v})
        tick(loop, 1)
        assert fut.result(timeout=0) == v and store.live == 1
    fut = loop.update_weights({"version": 3})
    tick(loop, 1)
    assert fut.result(timeout=0) == 3 and store.live == 0 and loop.stats()["payloads_expired"] == 1
    with pytest.raises(LostPayloads, match="expired"):
        fetch_into(store, samples, 1.0)


def test_a_scorer_that_fails_reports_every_sample_with_reward_0_and_reward_error():
    q = ScriptedQueue([[item(1, k=3)], [item(2)]])
    scorer = gated(error=RuntimeError("verifier pool died"))
    scorer.gate.set()
    loop = make_loop(q, scorer=scorer)
    loop.sampling = True
    tick(loop, 4)
    assert [iid for iid, _ in q.reports] == [1, 2]
    assert [(s.reward, s.reward_error) for s in q.reports[0][1]] == [(0.0, True)] * 3
    st = loop.stats()
    assert st["reward_errors"] == 5 and st["scorer_failures"] >= 1 and st["items"] == 2
    assert "verifier pool died" in loop.reports.last_scorer_error and loop.error is None


def test_a_stop_sends_the_reports_still_being_scored():
    q = ScriptedQueue([[item(1)]])
    engine = FakeEngine(first_j_right())
    scorer = gated()
    loop = make_loop(q, engine, scorer=scorer)
    loop.sampling = True
    tick(loop, 2, flush=False)
    assert scorer.entered.wait(2.0) and q.reports == []
    loop.stopping = True
    threading.Timer(0.05, scorer.gate.set).start()  # the verifier answers after the stop began
    loop.run()
    assert [iid for iid, _ in q.reports] == [1] and engine.aborts == 1 and loop.error is None


def test_a_stop_whose_reports_are_never_answered_fails_by_name():
    q = ScriptedQueue([[item(1)]])
    q.hold_reports = True
    loop = make_loop(q)
    loop.stop_flush_s = 0.05
    loop.sampling = True
    tick(loop, 2, flush=False)
    wait_until(lambda: q.reports)  # sent; its answer never comes
    loop.stopping = True
    loop.run()
    assert "report pipeline close" in loop.error and "1 report call(s) unanswered" in loop.error


def test_leasing_waits_while_more_than_capacity_waits_to_be_scored():
    q = ScriptedQueue([[item(i)] for i in range(1, 6)])
    scorer = gated()
    loop = make_loop(q, scorer=scorer, capacity=2)
    loop.sampling = True
    tick(loop, 2, flush=False)
    assert scorer.entered.wait(2.0)
    tick(loop, 6, flush=False)  # item 2 finishes too: 4 samples wait for the scorer, more than capacity
    calls = len(q.lease_calls)
    tick(loop, 5, flush=False)
    assert len(q.lease_calls) == calls and loop.stats()["unscored_samples"] > loop.capacity
    scorer.gate.set()
    loop.reports.flush(2.0)
    tick(loop, 2)
    assert len(q.lease_calls) > calls  # caught up: leasing again


def test_start_wakes_a_paused_loop_at_once():
    q = ScriptedQueue()
    loop = make_loop(q)
    loop.idle_paused_s = 5.0  # a paused loop polls for commands this slowly
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    time.sleep(0.05)  # the loop is waiting for a command
    t0 = time.monotonic()
    loop.start()
    wait_until(lambda: q.lease_calls)
    assert time.monotonic() - t0 < 1.0
    loop.stopping = True
    t.join(timeout=5.0)
    assert not t.is_alive() and loop.error is None


class CountingQueue(ScriptedQueue):
    """Records the item ids of each report call (one list a call) and when the call came."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[float, list[int]]] = []

    def report_many(self, sampler_id, reports, lease=None):
        self.calls.append((time.monotonic(), [iid for iid, _ in reports]))
        return super().report_many(sampler_id, reports, lease)


def _job(item_id):
    from ada_ray.actors.sampler_reports import Job
    from ada_ray.engines.protocol import Completion

    return Job.work(item(item_id, k=1), 0, [Completion([5], [-0.1], "ok", "stop")])


def test_a_report_interval_sends_the_work_of_several_passes_in_one_call():
    from ada_ray.actors.sampler_reports import ReportPipeline

    q = CountingQueue()
    pipe = ReportPipeline("s0", q, SafeScorer("exact"), report_interval_s=0.4)
    try:
        pipe.put([_job(1)])  # nothing sent yet: the first call goes at once
        wait_until(lambda: len(q.calls) == 1)
        t_first = q.calls[0][0]
        for i in (2, 3, 4):  # three passes inside the interval: held, then one call
            pipe.put([_job(i)])
            time.sleep(0.02)
        assert len(q.calls) == 1
        wait_until(lambda: len(q.calls) == 2, timeout_s=3.0)
        assert q.calls[1][1] == [2, 3, 4]
        assert q.calls[1][0] - t_first >= 0.4 - 0.01
        pipe.put([_job(5)])  # a flush does not wait out the interval
        t0 = time.monotonic()
        pipe.flush(2.0)
        assert time.monotonic() - t0 < 0.3 and q.calls[2][1] == [5]
        assert pipe.stats["report_calls"] == 3 and pipe.stats["items"] == 5
    finally:
        pipe.abandon()


def test_without_a_report_interval_every_pass_is_a_call_of_its_own():
    from ada_ray.actors.sampler_reports import ReportPipeline

    q = CountingQueue()
    pipe = ReportPipeline("s0", q, SafeScorer("exact"))
    try:
        for i in (1, 2, 3):
            pipe.put([_job(i)])
            wait_until(lambda: len(q.calls) == i)
        assert [ids for _, ids in q.calls] == [[1], [2], [3]]
    finally:
        pipe.abandon()


@pytest.mark.parametrize("overrides,expected", [
    ([], 0.25),  # auto, async mode: the samplers run ahead of the learner
    (["trainer.mode=sync"], 0.0),  # auto, sync mode: every round of a step would wait out its held reports
    (["sampler.report_interval_s=0"], 0.0),
    (["trainer.mode=sync", "sampler.report_interval_s=0.1"], 0.1),  # a number set is a number kept
])
def test_the_report_interval_auto_is_on_in_async_mode_only(overrides, expected):
    from ada_ray.actors.sampler_reports import report_interval
    from ada_ray.config import load_config

    assert report_interval(load_config("default", overrides)) == expected
