"""PromptQueue actor: the WorkScheduler behind an asyncio Ray actor.

Samplers long-poll `lease` (a call that finds nothing ready waits in line, lease_waiters.py, and is
served in arrival order as work appears: one wakeup per call that gets work) and report scored samples
with `report_many`, which may carry the sampler's next lease ask, answered at once (one call where there
were two). Through a node's QueueRelay many samplers' asks and reports come in one `lease_batch` /
`report_batch` call (actors/queue_relay.py). The driver waits for a cohort with `wait_cohort` (returns the cohort,
Signal.END when no more data or steps, or Signal.TIMEOUT). Leases expire by the clock here;
`release_sampler` hands a dead sampler's work out again at once. `stop` wakes every waiter with an
explicit sentinel (Signal.STOP to a lease, Signal.END to a cohort wait).

Once the scheduler holds its prompts and difficulty memory (at start and after a checkpoint load) the
process's heap is frozen out of the cyclic garbage collector (`settle_heap`): those objects live as long
as the queue, and with a million prompts every collection walking them made unpickling a report and
pickling a cohort 3-7x dearer (1M prompts: 84 -> 34 us of queue work an item in process, 116 -> 97 us of
the actor's CPU in bench scale; BENCHMARKS.md); and young-generation collections come less often. Each
cohort handed to the driver freezes what survived the step the same way (`freeze_survivors`).

Payloads (sampler.payload_transport = object_store): reported samples carry only metadata and the
PayloadBatch their token ids are in; the queue never fetches them, except to write a checkpoint
(`state_dict` fills every held sample first: a checkpoint holds no reference that dies with a
process). A retired sampler's batches are gone with it: `release_sampler(retire=True)` samples again
every prompt that held one (WorkScheduler.lose_owners); `return_cohort` takes back a cohort the learner
could not fetch.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Optional, Sequence

import ray

from ada_ray.actors.lease_waiters import LeaseWaiters
from ada_ray.actors.ray_payloads import RayPayloadStore
from ada_ray.algo.payloads import LostPayloads, fill, remote_batches
from ada_ray.algo.scheduler import CohortResult, WorkScheduler
from ada_ray.algo.types import Signal, WorkBatch, WorkItem
from ada_ray.config import from_dict


QUEUE_GC_THRESHOLD = (50_000, 10, 10)  # Python's default first generation is 700 new container objects


def settle_heap() -> None:
    """Collect garbage once, then move every object alive now out of the cyclic collector's reach
    (gc.freeze): the queue's long-lived state is never walked again by a collection. Reference counting
    still frees what is dropped later. Collections of the young generation then come every 50k new
    container objects instead of 700 (the queue makes and drops a few objects a sample; few form
    cycles): 37.2 -> 30.7 us of queue work an item in process (bench queue split, 1M prompts, three
    interleaved pairs)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*QUEUE_GC_THRESHOLD)


def freeze_survivors() -> None:
    """After a cohort is handed out: every object alive now (the open cohorts' prompts in flight, the
    difficulty memory's new entries) leaves the collector's reach too (gc.freeze moves lists, it walks
    nothing). Without it those objects age into the oldest generation, and each full collection walked
    them all: at 1M prompts, B = 16,384, 0.1-0.6 s a collection; with it the queue's CPU at 1M prompts /
    256 samplers / relays went 47-51 -> 38-47 µs an item (BENCHMARKS.md). The scheduler makes no reference
    cycles (a 1,000-step loop leaves no garbage for a full collection), so what is frozen is freed by
    reference counting as before; bench soak watches the queue's memory."""
    gc.freeze()


@ray.remote
class PromptQueue:
    def __init__(self, prompts: list, cfg: dict, estimator_state: Optional[dict] = None,
                 batch_prompts: Optional[int] = None):
        """`batch_prompts` overrides trainer.batch_prompts (a shard of a sharded queue holds its share)."""
        from ada_ray.algo.estimator import PassRateEstimator

        c = from_dict(cfg)
        est = PassRateEstimator(c.algo.est_alpha, c.algo.est_beta, c.algo.est_lambda)
        if estimator_state:
            est.load_state_dict(estimator_state)
        self.sched = WorkScheduler(
            prompts, c.algo, batch_prompts=batch_prompts or c.trainer.batch_prompts, max_staleness=c.trainer.max_staleness,
            mode=c.trainer.mode, prompt_order=c.trainer.prompt_order, seed=c.trainer.seed,
            total_epochs=c.trainer.total_epochs, total_steps=c.trainer.total_steps,
            lease_timeout_s=c.sampler.lease_timeout_s, estimator=est,
        )
        self.changed = asyncio.Event()  # wakes the driver's cohort wait
        self.waiters = LeaseWaiters()  # samplers' lease calls waiting for work
        self.retired: set[str] = set()  # sampler ids released for good (killed or replaced): never leased to again
        self.stopped = False
        self.payloads = RayPayloadStore()  # fetches payloads for a checkpoint (owns none)
        self.busy_s = 0.0  # time spent inside scheduler calls (queue overhead)
        self.calls = 0
        self.relayed_calls = 0  # lease_batch / report_batch calls: relays' combined calls
        settle_heap()

    def _notify(self) -> None:
        """Something changed: serve the waiting lease calls, wake the cohort wait."""
        self.waiters.serve(self._lease_now)
        self.changed.set()
        self.changed = asyncio.Event()

    async def _wait_change(self, timeout: float) -> None:
        ev = self.changed
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _lease_now(self, sampler_id: str, max_items: int, max_samples: Optional[int]) -> Sequence[WorkItem]:
        """Ready items for this ask, as one WorkBatch (columns: no object an item for Ray to pickle), or []."""
        t0 = time.perf_counter()
        items = self.sched.lease(sampler_id, max_items, time.monotonic(), max_samples)
        out = WorkBatch.of(items) if items else items
        self.busy_s += time.perf_counter() - t0
        self.calls += 1
        return out

    def _lease_or_stop(self, sampler_id: str, max_items: int, max_samples: Optional[int]):
        """Ready items for this ask now, or Signal.STOP once the queue stopped or the sampler is retired."""
        if self.stopped or sampler_id in self.retired:
            return Signal.STOP
        return self._lease_now(sampler_id, max_items, max_samples)

    async def lease(self, sampler_id: str, max_items: int, max_samples: Optional[int] = None, wait_s: float = 0.0):
        """Up to `max_items` work items; when none is ready, wait in line up to `wait_s` for some
        ([] if none came, Signal.STOP once the queue stops)."""
        items = self._lease_or_stop(sampler_id, max_items, max_samples)
        if items or wait_s <= 0:
            return items
        return await self.waiters.wait(sampler_id, max_items, max_samples, wait_s)

    async def lease_batch(self, asks: list, wait_s: float = 0.0) -> list:
        """A relay's combined lease call: one answer an ask `(sampler_id, max_items, max_samples)`, in
        order (its items, [] or Signal.STOP). When no ask gets work, the call waits in line as one,
        up to `wait_s`, until at least one does."""
        self.relayed_calls += 1
        answers = [self._lease_or_stop(*ask) for ask in asks]
        if wait_s <= 0 or any(answers):
            return answers
        return await self.waiters.wait_combined(asks, wait_s)

    def _report(self, batches: list, raise_errors: bool) -> list:
        """Apply `(sampler_id, reports)` pairs in order; one answer a pair (a list of bools), or, unless
        `raise_errors`, the exception the scheduler raised for that pair in its place."""
        t0 = time.perf_counter()
        out: list = []
        try:
            for sampler_id, reports in batches:
                try:
                    out.append([self.sched.report(sampler_id, item_id, samples) for item_id, samples in reports])
                except Exception as e:  # noqa: BLE001 - the answer of this pair only
                    if raise_errors:
                        raise
                    out.append(e)
        finally:
            self.busy_s += time.perf_counter() - t0
            self.calls += 1
            self._notify()
        return out

    async def report_many(self, sampler_id: str, reports: list, lease: Optional[tuple] = None):
        """Apply a sampler's reports: one bool a report (False: its lease had ended). `lease`
        (max_items, max_samples, wait_s): the sampler's next ask rides this call, after the reports are
        applied (one call where a report and a lease made two), and is answered as `lease` answers it: the
        ready items, or, when none is, a wait in line up to wait_s. The answer is then (the bools, the
        items: a list, maybe empty, or Signal.STOP). A report the scheduler refuses raises, and nothing is
        leased."""
        answers = self._report([(sampler_id, reports)], raise_errors=True)[0]
        if lease is None:
            return answers
        return answers, await self.lease(sampler_id, *lease)

    async def report_batch(self, batches: list) -> list:
        """A relay's combined report call: `(sampler_id, reports)` pairs, applied in order; one answer a
        pair: what `report_many` returns, or the exception the scheduler raised for that sampler's
        report (the relay raises it in that sampler's call; the others' reports stand)."""
        self.relayed_calls += 1
        return self._report(batches, raise_errors=False)

    async def cohort_ready(self, index: int, timeout_s: float) -> Signal:
        """Wait up to `timeout_s` for cohort `index` without taking it: Signal.READY, END or TIMEOUT
        (a sharded queue's coordinator takes from its shards only once every one is ready)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.sched.cohort_status(index)
            if status == Signal.READY:
                return Signal.READY
            if status == Signal.END or self.stopped:
                return Signal.END
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Signal.TIMEOUT
            await self._wait_change(min(remaining, 1.0))

    async def wait_cohort(self, index: int, timeout_s: float):
        status = await self.cohort_ready(index, timeout_s)
        if status != Signal.READY:
            return status
        t0 = time.perf_counter()
        res = self.sched.take_cohort(index)
        freeze_survivors()
        self.busy_s += time.perf_counter() - t0
        return res

    async def set_version(self, version: int) -> None:
        self.sched.set_version(version)
        self._notify()

    async def release_sampler(self, sampler_id: str, retire: bool = False) -> int:
        """Every item this sampler holds goes out again. `retire`: the sampler is gone (killed, replaced
        under a new id): its waiting lease calls end with STOP and any later call from it (one in flight
        when it was killed) gets STOP and no work - work granted to a process that is being killed would
        sit in the lease table until its lease expired, the cohort waiting with it."""
        n = self.sched.release_sampler(sampler_id)
        if retire:
            self.retired.add(sampler_id)
            self.waiters.drop(sampler_id, Signal.STOP)
            self.sched.lose_owners([sampler_id])  # its payload batches died with it
        self._notify()
        return n

    async def return_cohort(self, result: CohortResult, owners: list[str]) -> int:
        """The learner could not fetch the payloads of `owners` in the cohort just taken: it is open
        again, those prompts sampled again. Prompts restarted."""
        n = self.sched.return_cohort(result, owners)
        self._notify()
        return n

    async def stop(self) -> dict:
        """End of run: cancel outstanding work, wake every waiter, return the accounting."""
        self.stopped = True
        self.sched.shutdown()
        self.waiters.stop(Signal.STOP)
        self._notify()
        return self.sched.check_accounting()

    async def accounting(self) -> dict:
        return self.sched.check_accounting()

    async def stats(self) -> dict:
        s = self.sched
        return {"busy_s": self.busy_s, "calls": self.calls, "relayed_calls": self.relayed_calls,
                "waiting_leases": len(self.waiters), "ready_items": len(s.ready),
                "leased_items": len(s.leases), "leased_by": s.leases.holders(), "inflight_prompts": len(s.inflight),
                "open_cohorts": len(s.cohorts), "version": s.version,
                "prompts_reissued": s.prompt_counts.prompts_reissued}

    async def resources(self) -> dict:
        """This process's id, its CPU seconds so far and its memory: RSS, and the anonymous part of it (what
        the queue owns; the rest is shared code and memory-mapped files such as the prompt table)."""
        import psutil

        p = psutil.Process()
        cpu = p.cpu_times()
        mem = p.memory_full_info()
        return {"pid": p.pid, "cpu_s": cpu.user + cpu.system, "rss_mb": mem.rss / 2**20,
                "anon_mb": (mem.rss - mem.shared) / 2**20, "uss_mb": mem.uss / 2**20}

    async def state_dict(self, fetch_timeout_s: float = 300.0) -> dict:
        """The scheduler's state, every held sample whole: payloads are fetched first (off the event loop;
        a batch that is lost restarts its prompts), and the state is written with no wait after the
        last check, so no sample reported meanwhile is left without its payload."""
        loop = asyncio.get_running_loop()
        for _ in range(100):
            samples = list(self.sched.held_samples())
            batches = remote_batches(samples)
            if not batches:
                return self.sched.state_dict()
            try:
                fetched = await loop.run_in_executor(None, self.payloads.fetch, batches, fetch_timeout_s)
            except LostPayloads as e:
                self.sched.lose_owners(e.owners)
                self._notify()
                continue
            fill([x for x in samples if x.payload is not None and x.payload[0].key in fetched], fetched)
        raise RuntimeError("queue state: samples kept arriving without their payloads through 100 fetches")

    async def load_state_dict(self, state: dict) -> None:
        self.sched.load_state_dict(state)
        settle_heap()
        self._notify()

    async def estimator_state(self) -> dict:
        return self.sched.estimator.state_dict()
