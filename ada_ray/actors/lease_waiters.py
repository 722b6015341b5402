"""Long-polled lease calls waiting at the PromptQueue: `LeaseWaiters`.

A sampler's lease call that finds no ready work waits here, in arrival order, up to its own wait.
When work appears (a report asked for another round, a cohort opened, a lease expired) the queue
serves the waiters first come, first served, only while there is ready work: one wakeup per call
that gets items. Waking every waiter to let each look again (an event) cost the queue a lease
attempt per waiting sampler per report: with 256 samplers long-polling, that herd was most of its
work. Each waiter is one future, resolved once: by `serve` with its items, by its timer with an
empty list, or by `stop` with Signal.STOP. Runs on the actor's event loop; no locks needed.

A relay's combined call (actors/queue_relay.py) waits as one waiter holding many samplers' asks: it is
served when at least one of them gets items, and answers every ask (items, [] or, for a sampler
dropped meanwhile, the drop's signal); the relay asks again for the ones still waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional


Ask = tuple  # (sampler_id, max_items, max_samples)


@dataclass
class Waiter:
    asks: list  # one Ask (a sampler's own call) or several (a relay's combined call)
    future: asyncio.Future
    combined: bool = False  # answers a list, one answer an ask

    def answer(self, lease: Callable[[str, int, Optional[int]], list]) -> Any:
        """What `lease` gives this waiter now: its items (a combined waiter: one answer an ask), or
        None when no ask got any."""
        if not self.combined:
            return lease(*self.asks[0]) or None
        answers = [lease(*a) for a in self.asks]
        return answers if any(answers) else None


class LeaseWaiters:
    def __init__(self) -> None:
        self._waiting: deque[Waiter] = deque()

    def __len__(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    async def wait(self, sampler_id: str, max_items: int, max_samples: Optional[int], wait_s: float) -> Any:
        """Wait up to `wait_s` for `serve` (its items) or `stop` (Signal.STOP); [] when the wait ends."""
        return await self._wait(Waiter([(sampler_id, max_items, max_samples)], _future()), [], wait_s)

    async def wait_combined(self, asks: list, wait_s: float) -> list:
        """Many samplers' asks, waiting as one: up to `wait_s` for `serve` to give items to at least one
        of them; one answer an ask (items, [], or the signal of `stop` / `drop`)."""
        return await self._wait(Waiter(list(asks), _future(), combined=True), [[] for _ in asks], wait_s)

    async def _wait(self, w: Waiter, on_timeout: Any, wait_s: float) -> Any:
        while self._waiting and self._waiting[0].future.done():  # waits that ended since the last serve
            self._waiting.popleft()
        fut = w.future
        self._waiting.append(w)
        timer = asyncio.get_running_loop().call_later(wait_s, _resolve, fut, on_timeout)
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
            answer = w.answer(lease)
            if answer is None:
                break
            self._waiting.popleft()
            w.future.set_result(answer)
            served += 1
        return served

    def stop(self, signal: Any) -> None:
        while self._waiting:
            w = self._waiting.popleft()
            _resolve(w.future, [signal] * len(w.asks) if w.combined else signal)

    def drop(self, sampler_id: str, signal: Any) -> int:
        """End the waits of one sampler (gone: never hand it work) with `signal`; how many ended."""
        ended = 0
        for w in self._waiting:
            if w.future.done() or all(a[0] != sampler_id for a in w.asks):
                continue
            # a combined wait ends for all its asks: the others get [] and their relay asks again
            _resolve(w.future, [signal if a[0] == sampler_id else [] for a in w.asks] if w.combined else signal)
            ended += 1
        return ended


def _future() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


def _resolve(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)
