"""Runtime's fault path against fake actor handles, in milliseconds: a dead sampler is killed *before*
its work is released (and its id retired), so a live culprit cannot lease in between; its replacement
gets a new id and starts while the others go on (the bus is rebuilt among them at once, the new one
joins when it is up); a replacement that cannot start is given up with a warning and the run goes on with
fewer samplers; a long cohort wait says who holds the work; a cohort whose payloads were lost goes back
to the queue and a dead sampler is replaced; a second sampler dying while the bus is rebuilt for a first
is replaced in turn and the run goes on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ada_ray.algo.types import Signal
from ada_ray.config import load_config
from ada_ray.driver import runtime as rt_mod
from ada_ray.driver.runtime import Runtime


class Ref:
    """A pending call of a fake handle: `done` once it has answered (`error` raised by ray.get)."""

    def __init__(self, value=None, done=True, error=None):
        self.value, self.done, self.error = value, done, error


class Handle:
    """A fake actor handle: `h.method.remote(*args)` records the call and returns what `answers` says
    (a Ref for `ready`: `ready_done` / `ready_error` say whether it has answered and how)."""

    def __init__(self, name: str, events: list, answers: dict | None = None, ready_done=True, ready_error=None):
        self.name, self.events, self.answers = name, events, answers or {}
        self.ready_ref = Ref(True, ready_done, ready_error)

    def __getattr__(self, method: str):
        def remote(*args):
            self.events.append((self.name, method, *args))
            if method == "ready":
                return self.ready_ref
            got = self.answers.get(method)
            return got(*args) if callable(got) else got
        return SimpleNamespace(remote=remote)


def fake_wait(refs, num_returns=1, timeout=None):
    done = [r for r in refs if r.done]
    return done, [r for r in refs if not r.done]


def fake_get(ref, timeout=None):
    if ref.error:
        raise ref.error
    return ref.value


@pytest.fixture
def rt(monkeypatch):
    events: list = []
    monkeypatch.setattr(rt_mod, "_get", lambda refs, timeout_s, what: refs)
    monkeypatch.setattr(rt_mod.ray, "kill", lambda h, no_restart=True: events.append((h.name, "KILLED")))
    monkeypatch.setattr(rt_mod.ray, "wait", fake_wait)
    monkeypatch.setattr(rt_mod.ray, "get", fake_get)
    cfg = load_config("default", ["sampler.num_samplers=2", "sampler.start_timeout_s=0.2"])
    queue = Handle("queue", events, {"release_sampler": 3, "return_cohort": 2,
                                     "stats": {"ready_items": 0, "leased_by": {"sampler-0": 5}}})
    r = Runtime(cfg, None, queue, [Handle("sampler-0", events), Handle("sampler-1", events)],
                [Handle("learner-0", events)], 3, log=lambda line: events.append(("log", line)))
    r.next_ready = {}  # index -> (done, error) of the next replacement's start
    r._new_sampler = lambda i, version: Handle(r.sampler_id(i), events, None, *r.next_ready.get(i, (False, None)))
    r.open_bus = lambda: events.append(("bus", "open", tuple(sp.name for _, sp in r.active())))
    r._broadcast = lambda version: events.append(("bus", "broadcast", version)) or {}
    r.events = events
    return r


def test_a_dead_sampler_is_killed_before_its_work_is_released_and_its_id_retired(rt):
    rt.replace_samplers([1], "died")
    ev = [e for e in rt.events if e[0] != "log"]
    kill = ev.index(("sampler-1", "KILLED"))
    release = ev.index(("queue", "release_sampler", "sampler-1", True))
    assert kill < release  # killed first: it cannot lease between its release and its death
    assert rt.samplers[1].name == "sampler-1.1" and rt.sampler_id(1) == "sampler-1.1"  # a new id
    assert rt.replaced == 1


def test_the_others_go_on_while_a_replacement_starts_and_it_joins_once_up(rt):
    rt.replace_samplers([1], "died")
    ev = [e for e in rt.events if e[0] != "log"]
    # not waited for: the bus is rebuilt among the others at once and they get the weights
    assert ("bus", "open", ("sampler-0",)) in ev and ("bus", "broadcast", 0) in ev
    assert ("sampler-0", "leave_bus") in ev and ("sampler-1", "leave_bus") not in ev  # the dead one is not asked
    assert ("sampler-1.1", "start_sampling") not in ev and 1 in rt.starting
    assert rt.poll_starting() == []  # not up yet
    rt.samplers[1].ready_ref.done = True  # now it is
    assert rt.poll_starting() == [1]
    ev = [e for e in rt.events if e[0] != "log"]
    assert ev[-3:] == [("bus", "open", ("sampler-0", "sampler-1.1")), ("bus", "broadcast", 0),
                       ("sampler-1.1", "start_sampling")]  # it joins, gets the weights, then samples
    assert not rt.starting and [i for i, _ in rt.active()] == [0, 1]
    rt.replace_samplers([1], "died again")
    assert rt.samplers[1].name == "sampler-1.2"
    assert ("queue", "release_sampler", "sampler-1.1", True) in rt.events


@pytest.mark.parametrize("how", ["failed", "timeout"])
def test_a_replacement_that_cannot_start_leaves_the_run_going_with_fewer_samplers(rt, how):
    import time

    rt.last_stats = {0: {"busy_s": 1.0}, 1: {"busy_s": 2.0}}
    rt.next_ready[1] = (True, RuntimeError("no GPU")) if how == "failed" else (False, None)
    rt.replace_samplers([1], "died")
    if how == "timeout":
        time.sleep(0.25)  # past sampler.start_timeout_s
    assert rt.poll_starting() == []
    assert rt.gone == {1} and not rt.starting and [i for i, _ in rt.active()] == [0]
    warn = [e[1] for e in rt.events if e[0] == "log" and "WARNING" in e[1]]
    assert len(warn) == 1 and "sampler-1.1 could not be replaced" in warn[0] and "1 sampler(s) of 2" in warn[0]
    assert ("no GPU" in warn[0]) if how == "failed" else ("start_timeout_s" in warn[0])
    assert ("queue", "release_sampler", "sampler-1.1", True) in rt.events  # whatever it held goes out again
    assert rt.sampler_stats()[1] == {"busy_s": 2.0}  # its slot reports its last figures


def test_with_no_sampler_left_the_driver_waits_for_the_replacement_then_says_it_cannot_go_on(rt):
    from ada_ray.driver.runtime import RuntimeFailure

    rt.samplers = rt.samplers[:1]
    rt.next_ready[0] = (False, None)
    with pytest.raises(RuntimeFailure, match="no sampler could be started within sampler.start_timeout_s"):
        rt.replace_samplers([0], "died")
    assert any("no sampler is up" in e[1] for e in rt.events if e[0] == "log")


def test_a_long_cohort_wait_says_who_holds_the_work(rt):
    answers = iter([Signal.TIMEOUT, Signal.TIMEOUT, "the cohort"])
    rt.queue.answers["wait_cohort"] = lambda step, timeout: next(answers)
    rt.dead_samplers = lambda **kw: []
    rt.stall_note_s = 0.0
    assert rt.wait_cohort(4, timeout_s=100.0, poll_s=0.01) == "the cohort"
    notes = [e[1] for e in rt.events if e[0] == "log"]
    assert len(notes) == 2 and all("for cohort 4" in n and "'leased_by': {'sampler-0': 5}" in n for n in notes)


def test_a_cohort_with_lost_payloads_goes_back_and_the_dead_sampler_is_replaced(rt):
    found = iter([[0]])
    rt.dead_samplers = lambda **kw: next(found, [])  # sampler-0 is found dead once; its replacement is fine
    cohort = SimpleNamespace(index=3, groups=[1, 2, 3])
    assert rt.return_cohort(cohort, ["sampler-0"]) == 2
    ev = [e for e in rt.events if e[0] != "log"]
    assert ev.index(("queue", "return_cohort", cohort, ["sampler-0"])) < ev.index(("sampler-0", "KILLED"))
    assert rt.samplers[0].name == "sampler-0.1"


def test_a_sampler_that_died_since_the_last_update_is_replaced_before_the_broadcast(rt):
    """Otherwise the collective would wait for it until weight_sync.timeout_s and break under the others."""
    rt.queue.answers["set_version"] = None
    rt.samplers[1].ready_ref = Ref(error=RuntimeError("ActorDiedError"))
    rt.sync_weights(3)
    ev = [e for e in rt.events if e[0] != "log"]
    assert ev.index(("sampler-1", "KILLED")) < ev.index(("bus", "broadcast", 3))
    assert ("bus", "open", ("sampler-0",)) in ev  # the bus among the living, before version 3 is sent
    assert ("sampler-0", "KILLED") not in ev and 1 in rt.starting


def _dies_under_the_rebuild(rt, index: int, when: str):
    """Sampler `index` is up until the bus is rebuilt, then its loop is dead: at `leave` its leave_bus call
    fails, at `open` the bus's opening fails under it (its join_bus)."""
    def die():
        rt.samplers[index].ready_ref = Ref(error=RuntimeError("LoopDied: its relay was killed"))

    if when == "leave":
        def leave():
            die()
            raise RuntimeError("leave_bus: LoopDied")
        rt.samplers[index].answers["leave_bus"] = leave  # raises when called
    opened = rt.open_bus
    first = rt.samplers[index]

    def open_bus():
        if when == "open" and any(sp is first for _, sp in rt.active()):
            opened()
            die()
            raise RuntimeError("weight bus connect: sampler-0 loop died")
        opened()
    rt.open_bus = open_bus


@pytest.mark.parametrize("when", ["leave", "open"])
def test_a_second_sampler_dying_while_the_bus_is_rebuilt_is_replaced_and_the_run_goes_on(rt, when):
    """Two samplers behind one relay that is killed die of it one after the other: the first is replaced,
    and the second, found dead while the bus is rebuilt among "the others", is replaced in turn, not a
    crash of the run (tests/integration/test_faults.py's killed relay once failed so)."""
    rt.next_ready = {0: (True, None), 1: (True, None)}  # the replacements come up
    _dies_under_the_rebuild(rt, 0, when)
    rt.replace_samplers([1], "died")
    ev = [e for e in rt.events if e[0] != "log"]
    assert ("sampler-0", "KILLED") in ev and ("queue", "release_sampler", "sampler-0", True) in ev
    assert rt.replaced == 2 and [rt.samplers[i].name for i in (0, 1)] == ["sampler-0.1", "sampler-1.1"]
    assert any(e[0] == "log" and "sampler-0 died while the weight bus was" in e[1] for e in rt.events)
    assert ("bus", "open", ("sampler-0.1", "sampler-1.1")) in ev and ev[-1][1] == "start_sampling"
    assert not rt.starting and [i for i, _ in rt.active()] == [0, 1]


def test_a_bus_that_fails_to_open_with_every_sampler_alive_is_an_error(rt):
    def open_bus():
        raise RuntimeError("weight bus connect: bad port")
    rt.open_bus = open_bus
    with pytest.raises(RuntimeError, match="bad port"):
        rt.replace_samplers([1], "died")
