"""LeaseWaiters: waiting lease calls are served in arrival order, only while there is work, one
wakeup per call that gets work; a wait ends empty at its deadline, or with STOP. Each call waits on
its own thread, under the queue's lock, as the PromptQueue actor's calls do."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ada_ray.actors.lease_waiters import LeaseWaiters
from ada_ray.algo.types import Signal


class FakeQueue:
    """Ready work as a list of item names; `lease` hands out up to max_items and counts its calls."""

    def __init__(self):
        self.ready: list[str] = []
        self.calls = 0

    def lease(self, sampler_id: str, max_items: int, max_samples):
        self.calls += 1
        out, self.ready = self.ready[:max_items], self.ready[max_items:]
        return out


class Calls:
    """Lease calls on threads, as the actor makes them: each takes the lock, then waits in line."""

    def __init__(self, w: LeaseWaiters):
        self.w = w
        self.pool = ThreadPoolExecutor(16)

    def _locked(self, fn, *args):
        with self.w.lock:
            return fn(*args)

    def wait(self, sampler_id: str, max_items: int, wait_s: float = 5.0):
        return self._start(self.w.wait, sampler_id, max_items, None, wait_s)

    def wait_combined(self, asks: list, wait_s: float = 5.0):
        return self._start(self.w.wait_combined, asks, wait_s)

    def _start(self, fn, *args):
        before = self.waiting()
        fut = self.pool.submit(self._locked, fn, *args)
        deadline = time.monotonic() + 5
        while self.waiting() == before and not fut.done():  # in line (or already answered) before the next call
            assert time.monotonic() < deadline, "a wait never joined the line"
            time.sleep(0.001)
        return fut

    def waiting(self) -> int:
        with self.w.lock:
            return len(self.w)

    def serve(self, q: FakeQueue) -> int:
        with self.w.lock:
            return self.w.serve(q.lease)


def test_served_in_arrival_order_only_while_work_lasts():
    w, q = LeaseWaiters(), FakeQueue()
    c = Calls(w)
    calls = [c.wait(f"s{i}", 2) for i in range(4)]
    assert c.waiting() == 4
    q.ready = ["a", "b", "c"]
    assert c.serve(q) == 2  # s0 gets a, b; s1 gets c; s2 finds nothing and stays in line
    assert q.calls == 3  # not one lease attempt per waiter
    assert calls[0].result(5) == ["a", "b"] and calls[1].result(5) == ["c"]
    assert not calls[2].done() and not calls[3].done() and c.waiting() == 2
    q.ready = ["d"]
    c.serve(q)
    assert calls[2].result(5) == ["d"]
    time.sleep(0.05)
    assert not calls[3].done()
    with w.lock:
        w.stop(Signal.STOP)
    assert calls[3].result(5) == Signal.STOP and c.waiting() == 0


def test_a_wait_ends_empty_at_its_deadline_and_is_skipped_later():
    w, q = LeaseWaiters(), FakeQueue()
    c = Calls(w)
    short = c.wait("short", 1, 0.05)
    long = c.wait("long", 1, 5.0)
    assert short.result(5) == []
    q.ready = ["x"]
    assert c.serve(q) == 1
    assert long.result(5) == ["x"]  # the ended wait did not take the item
    assert q.calls == 1


def test_a_wait_releases_the_lock_while_it_sleeps():
    w = LeaseWaiters()
    c = Calls(w)
    waiting = c.wait("s", 1, 5.0)
    t0 = time.monotonic()
    assert w.lock.acquire(timeout=1.0)  # other calls go on while one waits
    w.lock.release()
    assert time.monotonic() - t0 < 1.0 and not waiting.done()
    with w.lock:
        w.stop(Signal.STOP)
    assert waiting.result(5) == Signal.STOP


def test_drop_ends_one_samplers_waits_and_serves_the_rest():
    w, q = LeaseWaiters(), FakeQueue()
    c = Calls(w)
    gone = c.wait("gone", 1)
    stays = c.wait("stays", 1)
    with w.lock:
        assert w.drop("gone", Signal.STOP) == 1 and w.drop("gone", Signal.STOP) == 0
    q.ready = ["x"]
    c.serve(q)
    assert gone.result(5) == Signal.STOP and stays.result(5) == ["x"]  # the killed sampler's wait took nothing


def test_a_combined_wait_is_served_when_one_of_its_asks_gets_work_and_answers_each_ask():
    w, q = LeaseWaiters(), FakeQueue()
    c = Calls(w)
    combined = c.wait_combined([("a", 1, None), ("b", 2, None)])
    behind = c.wait("c", 1)
    assert c.serve(q) == 0 and q.calls == 2  # nothing ready: each ask tried once, all still wait
    q.ready = ["x", "y"]
    assert c.serve(q) == 1  # the combined wait takes both: a gets x, b gets y; c finds none
    assert combined.result(5) == [["x"], ["y"]] and not behind.done()
    dropped = c.wait_combined([("a", 1, None), ("d", 1, None)])
    with w.lock:
        assert w.drop("d", Signal.STOP) == 1
    assert dropped.result(5) == [[], Signal.STOP]  # a asks again through its relay
    ends = c.wait_combined([("e", 1, None)], 0.05)
    assert ends.result(5) == [[]]
    at_stop = c.wait_combined([("f", 1, None), ("g", 1, None)])
    with w.lock:
        w.stop(Signal.STOP)
    assert behind.result(5) == Signal.STOP
    assert at_stop.result(5) == [Signal.STOP, Signal.STOP]  # every ask of a combined wait gets the signal


def test_serve_wakes_only_the_calls_it_gave_work_to():
    w, q = LeaseWaiters(), FakeQueue()
    c = Calls(w)
    calls = [c.wait(f"s{i}", 1) for i in range(3)]
    woken = []
    orig = threading.Condition.notify

    def counting_notify(self, n=1):
        woken.append(n)
        return orig(self, n)

    q.ready = ["x"]
    threading.Condition.notify = counting_notify
    try:
        c.serve(q)
    finally:
        threading.Condition.notify = orig
    assert woken == [1] and calls[0].result(5) == ["x"]
    with w.lock:
        w.stop(Signal.STOP)
    assert [f.result(5) for f in calls[1:]] == [Signal.STOP, Signal.STOP]
