"""Runtime's fault path against fake actor handles, in milliseconds: a dead sampler is killed *before*
its work is released (and its id retired), so a live culprit cannot lease in between; its replacement
gets a new id; a long cohort wait says who holds the work; a cohort whose payloads were lost goes back
to the queue and a dead sampler is replaced."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ada_ray.algo.types import Signal
from ada_ray.config import load_config
from ada_ray.driver import runtime as rt_mod
from ada_ray.driver.runtime import Runtime


class Handle:
    """A fake actor handle: `h.method.remote(*args)` records the call and returns what `answers` says."""

    def __init__(self, name: str, events: list, answers: dict | None = None):
        self.name, self.events, self.answers = name, events, answers or {}

    def __getattr__(self, method: str):
        def remote(*args):
            self.events.append((self.name, method, *args))
            got = self.answers.get(method)
            return got(*args) if callable(got) else got
        return SimpleNamespace(remote=remote)


@pytest.fixture
def rt(monkeypatch):
    events: list = []
    monkeypatch.setattr(rt_mod, "_get", lambda refs, timeout_s, what: refs)
    monkeypatch.setattr(rt_mod.ray, "kill", lambda h, no_restart=True: events.append((h.name, "KILLED")))
    cfg = load_config("default", ["sampler.num_samplers=2"])
    queue = Handle("queue", events, {"release_sampler": 3, "return_cohort": 2,
                                     "stats": {"ready_items": 0, "leased_by": {"sampler-0": 5}}})
    r = Runtime(cfg, None, queue, [Handle("sampler-0", events), Handle("sampler-1", events)],
                [Handle("learner-0", events)], 3, log=lambda line: events.append(("log", line)))
    r._new_sampler = lambda i, version: Handle(r.sampler_id(i), events)
    r.open_bus = lambda: events.append(("bus", "open"))
    r._broadcast = lambda version: events.append(("bus", "broadcast", version))
    r.events = events
    return r


def test_a_dead_sampler_is_killed_before_its_work_is_released_and_its_id_retired(rt):
    rt.replace_samplers([1], "died")
    ev = [e for e in rt.events if e[0] != "log"]
    kill = ev.index(("sampler-1", "KILLED"))
    release = ev.index(("queue", "release_sampler", "sampler-1", True))
    assert kill < release  # killed first: it cannot lease between its release and its death
    assert rt.samplers[1].name == "sampler-1.1" and rt.sampler_id(1) == "sampler-1.1"  # a new id
    assert ev.index(("sampler-1.1", "ready")) > release
    assert ("bus", "broadcast", 0) in ev and ev[-1] == ("sampler-1.1", "start_sampling")
    assert rt.replaced == 1
    rt.replace_samplers([1], "died again")
    assert rt.samplers[1].name == "sampler-1.2"
    assert ("queue", "release_sampler", "sampler-1.1", True) in rt.events


def test_a_long_cohort_wait_says_who_holds_the_work(rt):
    answers = iter([Signal.TIMEOUT, Signal.TIMEOUT, "the cohort"])
    rt.queue.answers["wait_cohort"] = lambda step, timeout: next(answers)
    rt.dead_samplers = lambda timeout_s=30.0: []
    rt.stall_note_s = 0.0
    assert rt.wait_cohort(4, timeout_s=100.0, poll_s=0.01) == "the cohort"
    notes = [e[1] for e in rt.events if e[0] == "log"]
    assert len(notes) == 2 and all("for cohort 4" in n and "'leased_by': {'sampler-0': 5}" in n for n in notes)


def test_a_cohort_with_lost_payloads_goes_back_and_the_dead_sampler_is_replaced(rt):
    rt.dead_samplers = lambda timeout_s=30.0: [0]
    cohort = SimpleNamespace(index=3, groups=[1, 2, 3])
    assert rt.return_cohort(cohort, ["sampler-0"]) == 2
    ev = [e for e in rt.events if e[0] != "log"]
    assert ev.index(("queue", "return_cohort", cohort, ["sampler-0"])) < ev.index(("sampler-0", "KILLED"))
    assert rt.samplers[0].name == "sampler-0.1"
