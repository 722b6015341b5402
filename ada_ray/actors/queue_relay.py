"""QueueRelay: a node's samplers reach the PromptQueue through it, their calls combined.

Every Ray actor call costs the serving process a fixed ~0.5-0.7 ms of CPU before any work (BENCHMARKS:
Ray's floor), so a queue that answers each sampler's lease and report on its own spends most of its core
on calls. A relay on a sampler node takes its samplers' calls (the `lease` and `report_many` a
PromptQueue answers, same arguments, same answers: a sampler does not know which it talks to; a lease ask
riding a report is answered after the report, from the next combined lease) and
forwards them combined: every ask that came since its last lease call in one `lease_batch`, every report
in one `report_batch`, one call of each kind out at a time, each leaving a short window after the first
call it carries came (group commit: the busier the node, the more a call carries).

Leases stay the samplers' own (each ask names its sampler), so a dead sampler's work is released as
before; the relay holds no work and no answered report: nothing in it is worth saving. When a relay
dies, the calls it had out fail, its samplers die of them and are replaced like any sampler fault, and
the first replacement on that node gets a new relay (driver/runtime.py).

Waiting: an ask the queue had nothing for (and whose own wait has not ended) joins the relay's waiting
asks, which go to the queue together as one long poll (`lease_batch` with a wait: the queue answers once
work appears for at least one of them). Asks that come meanwhile get their immediate try in the next
plain call, so a long poll never holds up an ask that could be served. An ask past its wait gets [].
A queue that does not answer a combined call within its wait plus `answer_timeout_s` fails the calls it
carried with a named error.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Optional

import ray


# sampler.queue_relay = auto: relays from this many samplers on (bench scale, BENCHMARKS "Relays": the
# queue's CPU per item fell 13% at 64 simulated samplers, 26% at 256, not at 8; a relay costs its own CPU
# and a hop: the main job's one sampler through a relay took 6.5% longer a step)
RELAY_AUTO_MIN_SAMPLERS = 64


def relay_enabled(sampler_cfg: Any) -> bool:
    """Whether samplers reach the queue through relays (sampler.queue_relay: per_node, direct, or auto:
    per_node from RELAY_AUTO_MIN_SAMPLERS samplers, where the queue's per-call cost starts to count)."""
    mode = sampler_cfg.queue_relay
    return mode == "per_node" or (mode == "auto" and sampler_cfg.num_samplers >= RELAY_AUTO_MIN_SAMPLERS)


def asks_ride_reports(sampler_cfg: Any) -> bool:
    """Whether a sampler's lease asks ride its report calls (sampler.leases_ride_reports): only when it
    calls the queue directly. A relay already combines its node's calls, and asks riding reports split its
    combined leases into smaller ones (bench scale, 1M prompts: the queue's CPU an item +10% at 64
    samplers, +30% at 256; BENCHMARKS "Lease asks ride report calls")."""
    return bool(sampler_cfg.leases_ride_reports) and not relay_enabled(sampler_cfg)


class RelayError(RuntimeError):
    """The queue did not answer a relay's combined call in time."""


@dataclass
class _Ask:
    sampler_id: str
    max_items: int
    max_samples: Optional[int]
    deadline: float  # monotonic: the end of this ask's wait
    future: asyncio.Future

    def key(self) -> tuple:
        return (self.sampler_id, self.max_items, self.max_samples)


class Relay:
    """The relay's logic (no Ray in it but the queue's handle); `QueueRelay` is the actor."""

    answer_timeout_s = 600.0  # a queue silent this long past a call's wait is stuck
    # a combined call leaves this long after the first call it carries came (more calls join it). Leases:
    # short (a sampler's feeder asks ahead of its engine's need, but an idle engine waits on it). Reports:
    # longer (no sampler waits for a report's answer; a round reaches its cohort <= 20 ms later). bench
    # scale, S = 256: 5 ms for both gave 1.3 reports a queue call, 20 ms 1.9 (queue CPU -22% / -28% an item)
    lease_window_s = 0.005
    report_window_s = 0.02

    def __init__(self, queue: Any, name: str = "relay"):
        self.queue = queue
        self.name = name
        self.fresh: list[_Ask] = []  # asks not tried yet
        self.waiting: list[_Ask] = []  # tried, nothing for them yet, their wait not over
        self.reports: list[tuple[str, list, asyncio.Future]] = []
        self.leasing = self.polling = self.reporting = False  # a call of that kind is out
        self.tasks: set = set()
        self.counts = {"asks": 0, "lease_calls": 0, "poll_calls": 0, "reports": 0, "report_calls": 0}

    # -- what a sampler calls (PromptQueue's signatures) ------------------------------------------

    async def lease(self, sampler_id: str, max_items: int, max_samples: Optional[int] = None, wait_s: float = 0.0):
        fut = asyncio.get_running_loop().create_future()
        self.fresh.append(_Ask(sampler_id, max_items, max_samples, time.monotonic() + wait_s, fut))
        self.counts["asks"] += 1
        if not self.leasing:
            self.leasing = True
            self._spawn(self._lease_loop())
        return await fut

    async def report_many(self, sampler_id: str, reports: list, lease: Optional[tuple] = None):
        fut = asyncio.get_running_loop().create_future()
        self.reports.append((sampler_id, reports, fut))
        self.counts["reports"] += 1
        if not self.reporting:
            self.reporting = True
            self._spawn(self._report_loop())
        out = await fut
        if isinstance(out, BaseException):  # what the scheduler raised for this sampler's report
            raise out
        if lease is None:
            return out
        # the ask that rode the report goes to the queue in the next combined lease, after the report
        return out, await self.lease(sampler_id, *lease)

    async def stats(self) -> dict:
        return dict(self.counts, waiting=len(self.waiting))

    # -- the combined calls ------------------------------------------------------------------------

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _queue(self, what: str, ref, timeout_s: float) -> Any:
        try:
            return await asyncio.wait_for(ref, timeout_s)
        except asyncio.TimeoutError:
            raise RelayError(f"queue relay {self.name}: the queue did not answer {what} within "
                             f"{timeout_s:.0f}s") from None

    async def _lease_loop(self) -> None:
        try:
            while self.fresh:
                await asyncio.sleep(self.lease_window_s)
                asks, self.fresh = self.fresh, []
                self.counts["lease_calls"] += 1
                await self._forward(asks, 0.0)
        finally:
            self.leasing = False

    async def _poll_loop(self) -> None:
        try:
            while self.waiting:
                asks, self.waiting = self.waiting, []
                now = time.monotonic()
                live = []
                for a in asks:
                    if a.future.done():
                        continue
                    if a.deadline <= now:
                        a.future.set_result([])
                    else:
                        live.append(a)
                if live:
                    self.counts["poll_calls"] += 1
                    await self._forward(live, min(a.deadline for a in live) - now)
        finally:
            self.polling = False

    async def _forward(self, asks: list[_Ask], wait_s: float) -> None:
        """One `lease_batch` for `asks`; answer those it served (or whose wait is over), keep the rest waiting."""
        try:
            answers = await self._queue("a combined lease", self.queue.lease_batch.remote([a.key() for a in asks], wait_s),
                                        wait_s + self.answer_timeout_s)
        except Exception as e:  # noqa: BLE001 - the queue's failure is every carried ask's
            for a in asks:
                if not a.future.done():
                    a.future.set_exception(e)
            return
        now = time.monotonic()
        for a, answer in zip(asks, answers):
            if a.future.done():
                continue
            if answer or a.deadline <= now:  # items, Signal.STOP, or [] at the end of its wait
                a.future.set_result(answer)
            else:
                self.waiting.append(a)
        if self.waiting and not self.polling:
            self.polling = True
            self._spawn(self._poll_loop())

    async def _report_loop(self) -> None:
        try:
            while self.reports:
                await asyncio.sleep(self.report_window_s)
                batch, self.reports = self.reports, []
                self.counts["report_calls"] += 1
                try:
                    out = await self._queue("a combined report",
                                            self.queue.report_batch.remote([(s, r) for s, r, _ in batch]),
                                            self.answer_timeout_s)
                except Exception as e:  # noqa: BLE001 - the queue's failure is every carried report's
                    out = [e] * len(batch)
                for (_, _, fut), answer in zip(batch, out):
                    if not fut.done():
                        fut.set_result(answer)
        finally:
            self.reporting = False


QueueRelay = ray.remote(Relay)
