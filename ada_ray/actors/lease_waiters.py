"""Long-polled lease calls waiting at the PromptQueue: `LeaseWaiters`.

A sampler's lease call that finds no ready work waits here, in arrival order, up to its own wait.
When work appears (a report asked for another round, a cohort opened, a lease expired) the queue
serves the waiters first come, first served, only while there is ready work: one wakeup per call
that gets items. Waking every waiter to let each look again (an event) cost the queue a lease
attempt per waiting sampler per report: with 256 samplers long-polling, that herd was most of its
work. Each waiter is one slot, filled once: by `serve` with its items, at its deadline with an
empty list, or by `stop` / `drop` with a signal.

The PromptQueue is a threaded actor (each call on one of its threads, its state under one lock):
every method here is called with that lock held, and `wait` releases it while the caller's thread
sleeps (each waiter has its own condition on the lock, so `serve` wakes exactly the calls it gave
work to).

A relay's combined call (actors/queue_relay.py) waits as one waiter holding many samplers' asks: it is
served when at least one of them gets items, and answers every ask (items, [] or, for a sampler
dropped meanwhile, the drop's signal); the relay asks again for the ones still waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Optional


Ask = tuple  # (sampler_id, max_items, max_samples)
_UNSET = object()


class Waiter:
    """One waiting call: its asks (one, or a relay's several), and the slot its answer goes in."""

    __slots__ = ("asks", "combined", "answer_value", "_cond")

    def __init__(self, asks: list, lock: threading.Lock, combined: bool = False):
        self.asks = asks
        self.combined = combined  # answers a list, one answer an ask
        self.answer_value: Any = _UNSET
        self._cond = threading.Condition(lock)

    @property
    def done(self) -> bool:
        return self.answer_value is not _UNSET

    def resolve(self, value: Any) -> bool:
        """Fill the slot (once) and wake the waiting call; False if it was already filled."""
        if self.answer_value is not _UNSET:
            return False
        self.answer_value = value
        self._cond.notify()
        return True

    def answer(self, lease: Callable[[str, int, Optional[int]], list]) -> Any:
        """What `lease` gives this waiter now: its items (a combined waiter: one answer an ask), or
        None when no ask got any."""
        if not self.combined:
            return lease(*self.asks[0]) or None
        answers = [lease(*a) for a in self.asks]
        return answers if any(answers) else None


class LeaseWaiters:
    def __init__(self, lock: Optional[threading.Lock] = None) -> None:
        """`lock`: the one the queue's state is under (every call here holds it)."""
        self.lock = lock or threading.Lock()
        self._waiting: deque[Waiter] = deque()

    def __len__(self) -> int:
        return sum(1 for w in self._waiting if not w.done)

    def wait(self, sampler_id: str, max_items: int, max_samples: Optional[int], wait_s: float) -> Any:
        """Wait up to `wait_s` for `serve` (its items) or `stop` (Signal.STOP); [] when the wait ends."""
        return self._wait(Waiter([(sampler_id, max_items, max_samples)], self.lock), [], wait_s)

    def wait_combined(self, asks: list, wait_s: float) -> list:
        """Many samplers' asks, waiting as one: up to `wait_s` for `serve` to give items to at least one
        of them; one answer an ask (items, [], or the signal of `stop` / `drop`)."""
        return self._wait(Waiter(list(asks), self.lock, combined=True), [[] for _ in asks], wait_s)

    def _wait(self, w: Waiter, on_timeout: Any, wait_s: float) -> Any:
        while self._waiting and self._waiting[0].done:  # waits that ended since the last serve
            self._waiting.popleft()
        self._waiting.append(w)
        deadline = time.monotonic() + wait_s
        while not w.done:
            left = deadline - time.monotonic()
            if left <= 0:
                w.resolve(on_timeout)  # skipped (and dropped) by the next serve
                break
            w._cond.wait(left)
        return w.answer_value

    def serve(self, lease: Callable[[str, int, Optional[int]], list]) -> int:
        """Hand ready work to the waiters in arrival order until `lease` has none left; how many got items."""
        served = 0
        while self._waiting:
            w = self._waiting[0]
            if w.done:  # its wait ended
                self._waiting.popleft()
                continue
            answer = w.answer(lease)
            if answer is None:
                break
            self._waiting.popleft()
            w.resolve(answer)
            served += 1
        return served

    def stop(self, signal: Any) -> None:
        while self._waiting:
            w = self._waiting.popleft()
            w.resolve([signal] * len(w.asks) if w.combined else signal)

    def drop(self, sampler_id: str, signal: Any) -> int:
        """End the waits of one sampler (gone: never hand it work) with `signal`; how many ended."""
        ended = 0
        for w in self._waiting:
            if w.done or all(a[0] != sampler_id for a in w.asks):
                continue
            # a combined wait ends for all its asks: the others get [] and their relay asks again
            w.resolve([signal if a[0] == sampler_id else [] for a in w.asks] if w.combined else signal)
            ended += 1
        return ended
