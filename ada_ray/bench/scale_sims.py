"""The simulated samplers of `ada-ray bench scale` (scale.py): many samplers in one Ray actor, each an
asyncio task that leases from the real PromptQueue (or its relays), "generates" by waiting a drawn service
time and reports synthetic samples whose rewards are Bernoulli(the prompt's known pass rate).

Two shapes of a sampler (`finish`):
- `together` (the bench's pattern so far): a sampler leases up to `max_items` items, waits
  one service time for all of them and reports them all in one call, its next ask riding that report
  (`leases=ride`) or asked apart (`feeder`, `probe`). Every call carries a whole lease: the most
  favourable case for the queue.
- `engine`: a sampler runs as the real one does (sampler_loop.py, sampler_leases.py,
  sampler_reports.py): an engine holding up to `max_items` items, each finishing after its own service
  time; every engine step (`step_ms`) hands what finished to the report pipeline, which sends it at once
  or, with `report_interval_ms` (sampler.report_interval_s), once that long has passed since its last
  call, never waiting for the answer; the feeder asks for the room left once it is a quarter of the
  capacity, one ask out at a time, riding the report call when one goes and the engine is at least half
  full (`leases=ride`, direct calls: sampler.leases_ride_reports), else a long poll of its own. With
  generations much longer than a step, a step finishes about one item: one report call an item unless
  the interval gathers them.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
import traceback
from typing import Optional

import ray

from ada_ray.actors.ray_payloads import RayPayloadStore
from ada_ray.actors.sampler_leases import LeaseFeeder
from ada_ray.algo.payloads import pack, remote_report
from ada_ray.algo.types import Sample, Signal
from ada_ray.bench.common import COMPLETION_TOKENS

TRANSPORTS = ("inline", "object_store", "object_store_samples")
LEASE_MODES = ("feeder", "probe", "ride")
SERVICE_CAP = 4.0  # a simulated generation takes at most this many times the mean service time


def pass_rate(prompt_id: str) -> float:
    """The known pass rate of a synthetic prompt: Beta(0.5, 1.5)-shaped, fixed by its id."""
    return random.Random(prompt_id).betavariate(0.5, 1.5)


FINISH_MODES = ("together", "engine")


def _set(fut) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


class SimSamplerError(RuntimeError):
    """A simulated sampler failed; the message holds its traceback."""


@ray.remote(num_cpus=0)
class SimSamplers:
    """`n` simulated samplers in one process: lease, sleep a service time, report Bernoulli rewards."""

    def __init__(self, shards: list, first_id: int, n: int, service_ms: float, max_items: int, seed: int,
                 transport: str = "inline", completion_tokens: int = COMPLETION_TOKENS,
                 owner_name: Optional[str] = None, max_staleness: int = 2, lease_mode: str = "ride",
                 finish: str = "together", step_ms: float = 20.0, report_interval_ms: float = 0.0):
        """`owner_name`: this actor's name in OWNERS_NAMESPACE (it owns its samplers' payload batches and
        serves them by `payload_refs`, as a Sampler does); batches expire as the leased work's version
        passes them (a real sampler expires them as its weights do). `finish`: the sampler's shape
        (FINISH_MODES, the module's docstring); `step_ms` and `report_interval_ms` are the engine shape's."""
        # sampler i leases from and reports to shard i % K, as in the Runtime
        self.queue_of = {f"sim{i}": shards[i % len(shards)] for i in range(first_id, first_id + n)}
        self.ids = list(self.queue_of)
        self.service_s = service_ms / 1000.0
        self.max_items = max_items
        self.rng = random.Random(seed)
        self.stopping = False
        self.lease_s: list[tuple[float, float]] = []  # (wall clock at the call, round trip s)
        self.report_s: list[tuple[float, float]] = []
        self.served = 0
        self.empty_leases = 0
        self.polls = 0
        self.lease_calls = 0  # every lease call, long polls included
        self.asks_on_reports = 0  # asks that rode a report call (leases=ride)
        self.rates: dict[str, float] = {}
        if transport not in TRANSPORTS:
            raise ValueError(f"bench scale: transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        self.store = RayPayloadStore(owner_name) if transport != "inline" else None
        self.max_staleness = max_staleness
        self.version = 0  # the newest version a leased item carried: the simulated weights
        self.blocks = transport == "object_store"  # object_store_samples: a Sample object a sample (before blocks)
        self.tokens = completion_tokens
        if lease_mode not in LEASE_MODES:
            raise ValueError(f"bench scale: lease mode {lease_mode!r}: expected one of {', '.join(LEASE_MODES)}")
        self.lease_mode = lease_mode
        if finish not in FINISH_MODES:
            raise ValueError(f"bench scale: finish {finish!r}: expected one of {', '.join(FINISH_MODES)}")
        self.finish = finish
        self.step_s = step_ms / 1000.0
        self.report_interval_s = report_interval_ms / 1000.0
        self.report_calls = 0

    def service_time(self) -> float:
        """Exponential with the configured mean, capped at SERVICE_CAP x the mean (max_tokens caps a
        real generation; an uncapped tail made every cohort of thousands of prompts wait for its one
        slowest draw)."""
        if self.service_s <= 0:
            return 0.0
        return min(self.rng.expovariate(1.0 / self.service_s), SERVICE_CAP * self.service_s)

    def _rewards(self, item) -> list[float]:
        p = self.rates.get(item.prompt_id)
        if p is None:
            p = self.rates[item.prompt_id] = pass_rate(item.prompt_id)
        return [1.0 if self.rng.random() < p else 0.0 for _ in range(item.num_samples)]

    def _reports(self, sid: str, items: list) -> list:
        """One report call's content, as the real sampler's pipeline builds it for the transport."""
        if self.store is None:
            return [(it.item_id, [Sample(it.prompt_id, [7] * self.tokens, [-0.5] * self.tokens, r, it.version)
                                  for r in self._rewards(it)]) for it in items]
        n = sum(it.num_samples for it in items)
        batch = self.store.put(pack([[7] * self.tokens] * n, [[-0.5] * self.tokens] * n, [""] * n), sid,
                               max(it.version for it in items))
        reports, row = [], 0
        for it in items:
            reports.append((it.item_id, remote_report(it.prompt_id, it.version, self._rewards(it), self.tokens, batch,
                                                      row, self.blocks)))
            row += it.num_samples
        return reports

    async def _lease(self, sid: str):
        """Work for one simulated sampler, or [] / Signal.STOP. `feeder` (as LeaseFeeder does): one call
        the queue may hold up to LeaseFeeder.lease_wait_s when it has nothing ready; its round trip is
        recorded when it brought work (a wait for work, if there was one, included). `probe` (this bench
        before the feeder was simulated): an ask answered at once, whose round trip is the recorded
        latency, then, when it came back empty, the long poll (`polls`): two calls where the feeder makes
        one whenever no work is ready."""
        q = self.queue_of[sid]
        if self.lease_mode in ("feeder", "ride"):
            return await self._ask(q, sid, self.max_items)
        w, t0 = time.time(), time.perf_counter()
        self.lease_calls += 1
        items = await q.lease.remote(sid, self.max_items, None, 0.0)
        self.lease_s.append((w, time.perf_counter() - t0))
        if items == Signal.STOP or items:
            return items
        self.empty_leases += 1
        self.polls += 1
        self.lease_calls += 1
        return await q.lease.remote(sid, self.max_items, None, LeaseFeeder.lease_wait_s)

    async def _one(self, sid: str) -> None:
        """Lease (`_lease`, unless the last report's ridden ask brought work), pause
        LeaseFeeder.empty_backoff_s after an empty answer, "generate", report."""
        ridden: list = []
        while not self.stopping:
            items, ridden = ridden or await self._lease(sid), []
            if items == Signal.STOP:
                return
            if not items:
                await asyncio.sleep(LeaseFeeder.empty_backoff_s)
                continue
            v = max(it.version for it in items)
            if self.store is not None and v > self.version:
                self.version = v
                self.store.expire(v, self.max_staleness)
            await asyncio.sleep(self.service_time())
            reports = self._reports(sid, items)
            w, t0 = time.time(), time.perf_counter()
            self.report_calls += 1
            if self.lease_mode == "ride":  # the next ask rides the report, a long poll as the feeder's
                self.asks_on_reports += 1
                _, ridden = await self.queue_of[sid].report_many.remote(
                    sid, reports, (self.max_items, None, LeaseFeeder.lease_wait_s))
                if ridden == Signal.STOP:
                    self.served += len(items)
                    return
                if ridden:  # a lease's latency: the round trip of the call that brought the work
                    self.lease_s.append((w, time.perf_counter() - t0))
                else:
                    self.empty_leases += 1
                    await asyncio.sleep(LeaseFeeder.empty_backoff_s)
            else:
                await self.queue_of[sid].report_many.remote(sid, reports)
            self.report_s.append((w, time.perf_counter() - t0))
            self.served += len(items)

    async def _engine(self, sid: str) -> None:
        """One sampler of the engine shape (the module's docstring). Engine steps end on a grid of
        `step_s`; the task wakes only at the end of a step where something happens (an item finishes, a
        held report falls due, an ask may go out) or when an ask is answered: a sampler costs its
        process CPU per event, not per step."""
        q = self.queue_of[sid]
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        wake: list = [None]  # the future the task sleeps on
        running: list[tuple[float, int, object]] = []  # a heap of (finish time, tie-break, item)
        finished: list = []  # handed to the report pipeline, not sent yet
        sent_at, retry_at, n = -float("inf"), 0.0, 0
        asking: Optional[asyncio.Task] = None
        reporting: set = set()
        min_room = max(1, self.max_items // 4)
        while not self.stopping:
            now = time.monotonic()
            if asking is not None and asking.done():
                items, asking = asking.result(), None
                if items == Signal.STOP:
                    break
                if not items:
                    retry_at = now + LeaseFeeder.empty_backoff_s
                for it in items:
                    if self.store is not None and it.version > self.version:
                        self.version = it.version
                        self.store.expire(it.version, self.max_staleness)
                    n += 1
                    heapq.heappush(running, (now + self.service_time(), n, it))
            while running and running[0][0] <= now:
                finished.append(heapq.heappop(running)[2])
            room = self.max_items - len(running) - len(finished)
            if finished and now >= sent_at + self.report_interval_s:
                batch, finished, sent_at = finished, [], now
                room += len(batch)
                # the feeder's ask rides the report while the engine is at least half full (direct calls)
                ride = (self.lease_mode == "ride" and asking is None and room >= min_room and now >= retry_at
                        and len(running) >= self.max_items // 2)
                task = asyncio.ensure_future(self._send(q, sid, batch, room if ride else None))
                reporting.add(task)
                task.add_done_callback(reporting.discard)
                if ride:
                    asking = task
                    asking.add_done_callback(lambda _: _set(wake[0]))
            # else the feeder asks by itself (an engine under half full, or no report coming)
            defer = self.lease_mode == "ride" and finished and len(running) >= self.max_items // 2
            if asking is None and room >= min_room and now >= retry_at and not defer:
                asking = asyncio.ensure_future(self._ask(q, sid, room))
                asking.add_done_callback(lambda _: _set(wake[0]))
            events = [running[0][0]] if running else []
            if finished:
                events.append(sent_at + self.report_interval_s)
            if asking is None and room >= min_room:
                events.append(retry_at)
            at = min(events, default=now + 1.0)  # nothing to wait for but an answer: look again in a second
            at = start + self.step_s * max(1, -(-(at - start) // self.step_s))  # the end of that engine step
            wake[0] = loop.create_future()
            timer = loop.call_later(max(0.0, at - now), _set, wake[0])
            await wake[0]
            timer.cancel()
        if reporting:
            await asyncio.gather(*reporting, return_exceptions=True)

    async def _ask(self, q, sid: str, room: int):
        """The feeder's long poll for up to `room` items; a round trip recorded when it brought work."""
        w, t0 = time.time(), time.perf_counter()
        self.lease_calls += 1
        items = await q.lease.remote(sid, room, None, LeaseFeeder.lease_wait_s)
        if items and items != Signal.STOP:
            self.lease_s.append((w, time.perf_counter() - t0))
        elif not items:
            self.empty_leases += 1
        return items

    async def _send(self, q, sid: str, items: list, ask: Optional[int] = None):
        """One report call; `ask`: the room an ask riding it asks for (its answer is returned)."""
        reports = self._reports(sid, items)
        w, t0 = time.time(), time.perf_counter()
        self.report_calls += 1
        if ask is None:
            await q.report_many.remote(sid, reports)
            leased = None
        else:
            self.asks_on_reports += 1
            _, leased = await q.report_many.remote(sid, reports, (ask, None, LeaseFeeder.lease_wait_s))
            if leased and leased != Signal.STOP:
                self.lease_s.append((w, time.perf_counter() - t0))
            elif not leased:
                self.empty_leases += 1
        self.report_s.append((w, time.perf_counter() - t0))
        self.served += len(items)
        return leased

    async def run(self) -> dict:
        one = self._engine if self.finish == "engine" else self._one
        try:
            await asyncio.gather(*(one(s) for s in self.ids))
        except Exception:  # noqa: BLE001 - named with its traceback as text: an error from the queue in it can fail to unpickle in the driver
            raise SimSamplerError(f"bench scale: simulated samplers {self.ids[0]}..{self.ids[-1]} failed:\n"
                                  f"{traceback.format_exc()[-4000:]}") from None
        return self.stats()

    def stop(self) -> None:
        self.stopping = True

    async def payload_refs(self, keys: list[str]) -> list:
        return self.store.refs(keys)

    def stats(self) -> dict:
        return {"served": self.served, "lease_s": self.lease_s, "report_s": self.report_s,
                "empty_leases": self.empty_leases, "polls": self.polls, "lease_calls": self.lease_calls,
                "asks_on_reports": self.asks_on_reports, "report_calls": self.report_calls}
