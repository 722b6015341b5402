"""Long-polled lease calls waiting at the PromptQueue: `LeaseWaiters`.

A sampler's lease call that finds no ready work waits here, in arrival order, up to its own wait.
When work appears (a report asked for another round, a cohort opened, a lease expired) the queue
serves the waiters first come, first served, only while there is ready work: one wakeup per call
that gets items. Waking every waiter to let each look again (an event) cost the queue a lease
attempt per waiting sampler per report: with 256 samplers long-polling, that herd was most of its
work. Each waiter is one future, resolved once: by `serve` with its items, by its timer with an
empty list, or by `stop` with Signal.STOP. Runs on the actor's event loop; no locks needed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass
class Waiter:
    sampler_id: str
    max_items: int
    max_samples: Optional[int]
    future: asyncio.Future


class LeaseWaiters:
    def __init__(self) -> None:
        self._waiting: deque[Waiter] = deque()

    def __len__(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    async def wait(self, sampler_id: str, max_items: int, max_samples: Optional[int], wait_s: float) -> Any:
        """Wait up to `wait_s` for `serve` (its items) or `stop` (Signal.STOP); [] when the wait ends."""
        while self._waiting and self._waiting[0].future.done():  # waits that ended since the last serve
            self._waiting.popleft()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append(Waiter(sampler_id, max_items, max_samples, fut))
        timer = loop.call_later(wait_s, _resolve, fut, [])
        try:
            return await fut
        finally:
            timer.cancel()

    def serve(self, lease: Callable[[str, int, Optional[int]], list]) -> int:
        """Hand ready work to the waiters in arrival order until `lease` has none left; how many got items."""
        served = 0
        while self._waiting:
            w = self._waiting[0]
            if w.future.done():  # its wait ended (timer or cancelled call)
                self._waiting.popleft()
                continue
            items = lease(w.sampler_id, w.max_items, w.max_samples)
            if not items:
                break
            self._waiting.popleft()
            w.future.set_result(items)
            served += 1
        return served

    def stop(self, signal: Any) -> None:
        while self._waiting:
            _resolve(self._waiting.popleft().future, signal)

    def drop(self, sampler_id: str, signal: Any) -> int:
        """End the waits of one sampler (gone: never hand it work) with `signal`; how many ended."""
        ended = 0
        for w in self._waiting:
            if w.sampler_id == sampler_id and not w.future.done():
                _resolve(w.future, signal)
                ended += 1
        return ended


def _resolve(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)
