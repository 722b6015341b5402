"""Leasing off the engine's loop thread: `LeaseFeeder`.

A thread keeps one lease call open at the PromptQueue while the loop wants work, waits for the
answer itself (the loop never blocks on, polls or deserializes a queue call), and leaves the work
items in an inbox that the loop drains between engine steps (`take`), waking an idle loop at once.
Every call lets the queue hold it up to `lease_wait_s` when it has no work (it answers as soon as
some appears, e.g. a reported round that asks for another): that wait is this thread's.

The feeder counts the samples it has handed out that the loop has not finished yet (`held`: in the
inbox or in the engine) and asks for exactly the room left below `capacity`, once that room is at
least a quarter of it: not a call per finished item (each call wakes threads on both sides), while
the engine runs on the other three quarters. It asks for nothing while the report pipeline is more
than `capacity` samples behind (scoring catches up first). An empty answer is followed by a pause
of `empty_backoff_s` unless the loop's state changes (no spinning on an empty queue); a call the
queue does not answer within its wait plus `answer_timeout_s` is an error, named, that the loop
dies of. No Ray here: the queue is a `QueueLink`.

Asks ride reports (`report_coming` given, sampler.leases_ride_reports): while the report pipeline holds
finished work not yet sent and the engine is at least half full, the feeder leaves its ask to that
report (`claim`: the pipeline's report call carries it, `adopt`: its answer comes here): one queue call
where a report and a lease made two, and the next round the report makes can come straight back. The
ridden ask is a long poll like the feeder's own (the queue holds the call up to `lease_wait_s` when it
has no work; the report in it is applied at once). An engine under half full, or no report coming, and
the feeder asks by itself at once, as before.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, Optional

from ada_ray.actors.sampler_links import QueueLink
from ada_ray.algo.types import Signal, WorkItem


class _RideFailed(list):
    """The answer of a ridden ask whose report call failed: no items (an empty list), no pause after it."""


_RIDE_FAILED = _RideFailed()


class LeaseError(RuntimeError):
    """The feeder stopped: a lease call failed or went unanswered."""


class LeaseFeeder:
    lease_wait_s = 0.5  # how long the queue may hold a lease call when the engine is empty
    empty_backoff_s = 0.05  # after an empty answer, before asking again (unless the loop's state changes)
    answer_timeout_s = 600.0  # a queue silent this long past a call's wait is stuck: the loop dies, the run heals
    poll_s = 0.05  # the thread's longest sleep between looking at its state (close, changes)
    max_items = 1_000_000  # an ask is bounded by samples (the room left), not by items

    def __init__(self, sampler_id: str, queue: QueueLink, capacity: int,
                 scoring_behind: Callable[[], bool], wake_loop: Callable[[], None],
                 report_coming: Optional[Callable[[], bool]] = None):
        """`report_coming`: whether the report pipeline holds finished work not yet sent (None: asks never
        ride reports)."""
        self.id = sampler_id
        self.queue = queue
        self.capacity = capacity
        self.min_room = max(1, capacity // 4)
        self.scoring_behind = scoring_behind
        self.wake_loop = wake_loop
        self.error: Optional[str] = None
        self.report_coming = report_coming
        self.stats = {"lease_calls": 0, "leased_items": 0, "empty_leases": 0, "asks_on_reports": 0}
        self._cv = threading.Condition()
        self._inbox: list[WorkItem] = []
        self._held = 0  # samples handed out (inbox or engine) and not yet finished or dropped
        self._active = False  # the loop wants work (sampling, weights whole)
        self._stop_signal = False  # the queue answered Signal.STOP (cleared when the loop wants work again)
        self._retry_at = 0.0  # after an empty answer: no call before this (monotonic clock)
        self._calling = False  # a lease call is out (the feeder's own, or an ask riding a report)
        self._ridden: Any = None  # the pending report call an ask rode, adopted and not yet answered
        self._queue_holds = False  # ... and the queue has not answered it yet
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"sampler-{sampler_id}-leases", daemon=True)
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------------

    def want(self, active: bool) -> None:
        """Whether the loop takes work now (sampling, weights whole)."""
        with self._cv:
            if active == self._active:
                return
            if active:
                self._stop_signal = False  # sampling again after a stop: ask again
            self._active = active
            self._retry_at = 0.0
            self._cv.notify_all()

    def take(self) -> tuple[list[WorkItem], bool]:
        """(work items leased since the last call, whether the queue answered Signal.STOP)."""
        with self._cv:
            items, self._inbox = self._inbox, []
            return items, self._stop_signal

    def finished(self, samples: int) -> None:
        """`samples` handed out have left the engine (finished, or dropped with a failed update)."""
        with self._cv:
            self._held = max(0, self._held - samples)
            self._retry_at = 0.0
            self._cv.notify_all()

    @property
    def held(self) -> int:
        return self._held

    def room(self) -> int:
        """Samples the next lease call may ask for."""
        return 0 if self.scoring_behind() else self.capacity - self._held

    def raise_if_failed(self) -> None:
        if self.error:
            raise LeaseError(f"sampler {self.id}: lease feeder failed: {self.error}")

    def settle(self, timeout: float) -> None:
        """Wait until the thread is parked: no call due and none out, or one out that the queue
        holds (tests: ticks that see every answer the queue has given)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self.error and ((self._calling and not self._queue_holds) or (not self._calling and self._due())):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"sampler {self.id}: lease feeder did not settle within {timeout:g}s")
                self._cv.wait(min(left, self.poll_s))

    def close(self) -> None:
        """Stop the thread (a call still out is left to the queue: its work goes out again)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5.0)

    # -- the report pipeline's side: an ask rides a report --------------------------------------

    def claim(self) -> Optional[tuple[int, int, float]]:
        """Called by the report pipeline just before it sends a report: if an ask is due and the engine at
        least half full (the ask the feeder leaves to a report), it is the report's to carry:
        (max_items, max_samples, wait_s) to send with it, and `adopt` (or `unclaim`) must follow; else None."""
        with self._cv:
            if not (self._ask_due() and self._engine_full_enough()):
                return None  # none due, or the engine is under half full: the feeder's own long poll asks
            self._calling, self._queue_holds = True, False
            self.stats["asks_on_reports"] += 1
            return (self.max_items, self.room(), self.lease_wait_s)

    def adopt(self, pending: Any) -> None:
        """The claimed ask went out with this report call: its answer (report answers, lease answer) is
        this thread's to take."""
        with self._cv:
            self._ridden = pending
            self._cv.notify_all()

    def unclaim(self) -> None:
        """The report carrying the claimed ask could not be sent: the feeder asks by itself."""
        with self._cv:
            self._calling = False
            self._cv.notify_all()

    def nudge(self) -> None:
        """The report pipeline's backlog changed: look again whether to ask now."""
        with self._cv:
            self._cv.notify_all()

    # -- the feeder's thread -------------------------------------------------------------------

    def _ask_due(self) -> bool:
        """An ask should go out now, by the feeder or riding a report (under the lock)."""
        return (self._active and not self._stop_signal and not self._closed and not self._calling
                and self.room() >= self.min_room and time.monotonic() >= self._retry_at)

    def _due(self) -> bool:
        """The feeder should make a lease call itself now (under the lock): an ask is due and no report
        that could carry it is coming while the engine is at least half full."""
        return self._ask_due() and not (self.report_coming is not None and self._engine_full_enough()
                                        and self.report_coming())

    def _engine_full_enough(self) -> bool:
        """At least half the capacity is in the engine or on its way: an ask can wait for a report."""
        return self._held >= self.capacity // 2

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._closed and not self._due() and self._ridden is None:
                        self._cv.wait(self.poll_s)
                    if self._closed:
                        return
                    ridden, self._ridden = self._ridden, None
                    if ridden is None:
                        room = self.room()
                        self._calling, self._queue_holds = True, False
                answer = self._call(room, self.lease_wait_s) if ridden is None else self._ride_answer(ridden)
                with self._cv:
                    self._calling = False
                    if answer is None:  # closed while waiting
                        return
                    if answer == Signal.STOP:
                        self._stop_signal = True
                    elif answer:
                        self._inbox.extend(answer)
                        self._held += sum(it.num_samples for it in answer)
                        self.stats["leased_items"] += len(answer)
                    elif answer is not _RIDE_FAILED:
                        self.stats["empty_leases"] += 1
                        self._retry_at = time.monotonic() + self.empty_backoff_s
                    # a report that failed carried no ask (the report pipeline raises its error): the
                    # feeder asks by itself, without a pause
                    self._cv.notify_all()
                if answer:
                    self.wake_loop()
        except Exception:  # noqa: BLE001 - the loop raises it on its next tick
            self.error = traceback.format_exc(limit=8)
            with self._cv:
                self._calling = False
                self._cv.notify_all()
            self.wake_loop()

    def _ride_answer(self, pending: Any) -> Any:
        """The lease answer of a report call an ask rode (_RIDE_FAILED if the report failed: the report
        pipeline raises that; None if closed meanwhile); raises past the deadline."""
        if not self._await(pending, self.lease_wait_s, "report call carrying a lease ask"):
            return None
        try:
            return self.queue.get(pending)[1]
        except Exception:  # noqa: BLE001 - the report's error: the report pipeline's to raise
            return _RIDE_FAILED

    def _call(self, room: int, wait_s: float) -> Any:
        """One lease call and its answer (None if closed meanwhile); raises past the deadline."""
        ref = self.queue.lease(self.id, self.max_items, room, wait_s)
        self.stats["lease_calls"] += 1
        if not self._await(ref, wait_s, f"lease call (room {room}, wait {wait_s:g}s)"):
            return None
        return self.queue.get(ref)

    def _await(self, pending: Any, wait_s: float, what: str) -> bool:
        """Wait for a call the queue may hold up to `wait_s`: True once answered, False if the feeder was
        closed meanwhile; a TimeoutError naming `what` past its wait plus answer_timeout_s."""
        deadline = time.monotonic() + wait_s + self.answer_timeout_s
        while True:
            ready, _ = self.queue.wait([pending], self.poll_s)
            if ready:
                return True
            with self._cv:
                if self._closed:
                    return False
                self._queue_holds = True
                self._cv.notify_all()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} unanswered after {wait_s + self.answer_timeout_s:g}s")
