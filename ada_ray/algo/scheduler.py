"""The work scheduler behind the PromptQueue actor: pure, deterministic, no Ray.

Batches are *cohorts*: cohort c is the set of prompts trained at step c (policy version c). Its
prompts may start sampling once the policy version is >= c - max_staleness (admission control,
AReaL-style): every sample trained at version c was then produced by a version >= c - max_staleness,
so the staleness bound holds by construction and slow, hard prompts are paced, never discarded.
Sync mode is max_staleness = 0 plus a round barrier inside the cohort (the official
implementation's semantics).

Work order: the oldest open cohort first; inside it, the next round of an in-flight prompt before
a new prompt. Each work item has a seed derived from (seed, prompt, cohort, round), so the samples
of a step do not depend on which sampler ran them or in which order (sync mode is reproducible).

Leases (leases.py): a leased item belongs to one sampler until it reports, its lease expires, or the
sampler is released (dead); the work then goes out again as a new item. Accounting invariant,
checked by `check_accounting`: issued = completed + reissued + cancelled + outstanding (the lease
table's counters), and every prompt drawn from the data is in exactly one place (in flight,
finished in an untaken cohort, trained, dropped by the strategy's `should_replace`, or cancelled
at shutdown). Checkpoints: scheduler_state.py (the cohort record, the prompt counters, queue.json).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Optional, Sequence, Union

from ada_ray.algo import scheduler_state
from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.leases import LeaseTable
from ada_ray.algo.prompt_order import PromptOrder
from ada_ray.algo.prompt_source import PromptSource, as_source
from ada_ray.algo.ready_queue import ReadyQueue
from ada_ray.algo.scheduler_state import Cohort, PromptCounts
from ada_ray.algo.prompt_state import PromptState
from ada_ray.algo.strategies import Strategy, make_strategy
from ada_ray.algo.types import (Group, Prompt, Sample, SampleBlock, Signal, WorkItem, groups_from_wire,
                                groups_to_wire)

if TYPE_CHECKING:
    from ada_ray.config import AlgoConfig


def _made_by(samples: Sequence[Sample], owners: set[str]) -> bool:
    if isinstance(samples, SampleBlock):
        return samples.batch.owner in owners
    return any(s.payload is not None and s.payload[0].owner in owners for s in samples)


def item_seed(seed: int, prompt_id: str, cohort: int, round_: int) -> int:
    h = hashlib.blake2b(f"{seed}|{prompt_id}|{cohort}|{round_}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


@dataclass
class CohortResult:
    """A completed cohort, handed to the learner: B kept groups plus what DAPO dropped."""

    index: int
    groups: list[Group]
    dropped: list[Group]
    draws: int
    dapo_cap_hit: bool
    samples_generated: int
    skipped: int = 0  # prompts passed over at the draw (ada_budget: parked)

    def __reduce__(self):
        """Its groups, kept and dropped, pickled together as columns (types.groups_to_wire): the cohort
        leaves the PromptQueue as a few lists, not an object a group and a tuple a sample."""
        return _cohort_from_wire, (self.index, len(self.groups), groups_to_wire(self.groups + self.dropped), self.draws,
                                   self.dapo_cap_hit, self.samples_generated, self.skipped)


def _cohort_from_wire(index: int, kept: int, groups: tuple, *counts) -> CohortResult:
    every = groups_from_wire(*groups)
    return CohortResult(index, every[:kept], every[kept:], *counts)


class SchedulerError(RuntimeError):
    pass


class WorkScheduler:
    def __init__(
        self,
        prompts: Union[PromptSource, Sequence[Prompt]],
        algo: AlgoConfig,
        *,
        batch_prompts: int,
        max_staleness: int = 0,
        mode: str = "async",
        prompt_order: str = "sequential",
        seed: int = 0,
        total_epochs: Optional[int] = None,
        total_steps: Optional[int] = None,
        lease_timeout_s: float = 600.0,
        estimator: Optional[PassRateEstimator] = None,
    ):
        if mode not in ("async", "sync"):
            raise ValueError(f"unknown mode {mode!r}")
        self.prompts = as_source(prompts)  # ids here; token ids stay in the source until a prompt is admitted
        if batch_prompts > len(self.prompts):
            raise ValueError(f"batch_prompts = {batch_prompts} is more than the {len(self.prompts)} prompts in the "
                             "training set: a cohort never holds a prompt twice")
        self.algo = algo
        self.strategy: Strategy = make_strategy(algo)
        self.batch_prompts = batch_prompts
        self.mode = mode
        self.max_staleness = 0 if mode == "sync" else max_staleness
        self.barrier = mode == "sync"
        self.seed = seed
        self.total_steps = total_steps
        self.lease_timeout_s = lease_timeout_s
        self.estimator = estimator or PassRateEstimator(algo.est_alpha, algo.est_beta, algo.est_lambda)
        if algo.prior_weight > 0:
            for pid, rate in self.prompts.priors():  # offline pass rates (prepare-data) seed the difficulty memory
                self.estimator.seed_prior(pid, rate, algo.prior_weight)
        self.order = PromptOrder(self.prompts.ids(), prompt_order, seed, total_epochs)
        self.version = 0
        self.next_cohort = 0  # next cohort index to open
        self.first_untaken = 0  # cohorts below this have been handed to the learner
        self.data_exhausted = False
        self.deferred: list[str] = []  # prompts that came up again inside one cohort (epoch boundary)
        self.end_cohort: Optional[int] = None  # first cohort index that will never exist
        self.cohorts: dict[int, Cohort] = {}
        self.inflight: dict[tuple[int, str], PromptState] = {}  # key: (cohort, prompt_id)
        self.ready = ReadyQueue()  # work order: oldest cohort, next rounds before new prompts, first in first out
        self.leases = LeaseTable(lease_timeout_s)
        self.prompt_counts = PromptCounts()
        self.next_item_id = 0
        self.open_cohorts()

    # ------------------------------------------------------------------------------------------
    # cohorts and admission
    # ------------------------------------------------------------------------------------------

    def _admit_limit(self) -> int:
        """Highest cohort index that may be open at the current version."""
        limit = self.version + self.max_staleness
        if self.total_steps is not None:
            limit = min(limit, self.total_steps - 1)
        return limit

    def open_cohorts(self) -> None:
        while self.end_cohort is None and self.next_cohort <= self._admit_limit():
            self._open(self.next_cohort)
            self.next_cohort += 1

    def _draw(self, co: Cohort, taken: set[str]) -> Optional[str]:
        """The id of the next prompt for cohort `co`, which holds `taken` (the caller keeps that set: rebuilt
        on every draw it made opening a cohort of B prompts cost O(B^2)). A cohort never holds a prompt
        twice: across an epoch boundary the same prompt can come up again; it is deferred to the next cohort.
        A prompt the strategy does not admit (ada_budget: parked) is passed over for this cohort; after a
        whole dataset's worth of them in a row the next one is taken anyway, so a draw always ends."""
        if len(taken) >= len(self.prompts):
            return None  # the cohort holds every prompt: the loop below would defer forever
        for i, pid in enumerate(self.deferred):
            if pid not in taken:
                del self.deferred[i]
                self.prompt_counts.prompts_drawn += 1
                return pid
        passed = 0
        while not self.data_exhausted:
            nxt = self.order.next(self.estimator)
            if nxt is None:
                self.data_exhausted = True
                break
            if nxt[0] in taken:
                self.deferred.append(nxt[0])
                continue
            if passed < len(self.prompts) and not self.strategy.admits(nxt[0], self.estimator, self.seed, co.index):
                passed += 1
                co.skipped += 1
                continue
            self.prompt_counts.prompts_drawn += 1
            return nxt[0]
        return None

    def _open(self, index: int) -> None:
        co = Cohort(index)
        taken: set[str] = set()
        ids: list[str] = []
        while len(ids) < self.batch_prompts:
            pid = self._draw(co, taken)
            if pid is None:
                break
            taken.add(pid)
            ids.append(pid)
        drawn = self.prompts.get_many(ids)  # the cohort's prompts read whole, in one go
        if not drawn:
            self.end_cohort = index
            return
        self.cohorts[index] = co
        co.target = len(drawn)
        sizes = self.strategy.first_round_sizes(drawn, self.estimator)
        for p, k in zip(drawn, sizes):
            self._start_prompt(co, p, k)

    def _start_prompt(self, co: Cohort, p: Prompt, k: int, new_draw: bool = True) -> None:
        if new_draw:
            co.admitted.append(p.prompt_id)
            co.draws += 1
        key = (co.index, p.prompt_id)
        if key in self.inflight:
            raise SchedulerError(f"prompt {p.prompt_id} admitted twice into cohort {co.index}")
        self.inflight[key] = PromptState(p, co.index, self.algo.positive_threshold)
        self._push(self._new_item(p, co.index, 0, k))
        co.running_items += 1

    def _new_item(self, p: Prompt, cohort: int, round_: int, k: int) -> WorkItem:
        self.next_item_id += 1
        return WorkItem.make(self.next_item_id, p.prompt_id, p.token_ids, p.answer, k, cohort, round_,
                             item_seed(self.seed, p.prompt_id, cohort, round_), self.version)

    def _push(self, item: WorkItem) -> None:
        self.ready.push(item)

    def set_version(self, version: int) -> None:
        if version < self.version:
            raise SchedulerError(f"policy version went backwards: {self.version} -> {version}")
        self.version = version
        self.open_cohorts()

    # ------------------------------------------------------------------------------------------
    # samplers
    # ------------------------------------------------------------------------------------------

    def lease(self, sampler_id: str, max_items: int, now: float, max_samples: Optional[int] = None) -> list[WorkItem]:
        """Up to `max_items` items (and about `max_samples` samples: always at least one item),
        oldest cohort first, next rounds before new prompts."""
        self.expire(now)
        out: list[WorkItem] = []
        samples = 0
        ready = self.ready
        while ready and len(out) < max_items:
            if max_samples is not None and out and samples + ready.peek().num_samples > max_samples:
                break
            item = ready.pop()
            samples += item.num_samples
            item = item.but(version=self.version)
            self.leases.grant(item, sampler_id, now)
            out.append(item)
        return out

    def has_ready_work(self) -> bool:
        return bool(self.ready)

    def _requeue(self, items: list[WorkItem]) -> int:
        """Work whose lease ended goes out again, each item under a new id."""
        for item in items:
            self.next_item_id += 1
            self._push(item.but(item_id=self.next_item_id))
        return len(items)

    def expire(self, now: float) -> int:
        return self._requeue(self.leases.expire(now))

    def release_sampler(self, sampler_id: str) -> int:
        """A sampler died: every item it holds goes out again."""
        return self._requeue(self.leases.release(sampler_id))

    def report(self, sampler_id: str, item_id: int, samples: Sequence[Sample]) -> bool:
        """A sampler's scored samples for one item (a list, or a SampleBlock: no Sample is built for a
        sample that is not kept). False when the lease had already ended."""
        item = self.leases.lookup(item_id)
        if item is None:
            return False
        if len(samples) != item.num_samples:  # refused; the lease stays
            raise SchedulerError(
                f"sampler {sampler_id} reported {len(samples)} samples for item {item_id}, "
                f"which asked for {item.num_samples}"
            )
        self.leases.complete(item_id)
        if isinstance(samples, SampleBlock):
            samples.set_round(item.round)
        else:
            for s in samples:
                s.round = item.round
        co = self.cohorts[item.cohort]
        co.samples += len(samples)
        co.running_items -= 1
        st = self.inflight[(item.cohort, item.prompt_id)]
        st.add_round(samples)
        k = self.strategy.next_round_size(st, self.estimator)
        if k is not None:
            nxt = self._new_item(st.prompt, item.cohort, st.rounds_done, k)
            co.running_items += 1
            if self.barrier:
                co.held.append(nxt)
            else:
                self._push(nxt)
        else:
            self._finish(co, st)
        if self.barrier and co.running_items == len(co.held) and co.held:
            for held in co.held:
                self._push(held)
            co.held = []
        return True

    # ------------------------------------------------------------------------------------------
    # lost payloads (a sampler died while samples of its reports waited to be trained)
    # ------------------------------------------------------------------------------------------

    def lose_owners(self, owners: Collection[str]) -> int:
        """The payload batches made by these samplers are gone (they died). Every prompt of an open
        cohort holding a sample of theirs is sampled again from round 0 in its cohort (its outstanding
        item cancelled; counted in prompts_reissued); nothing of theirs is trained. Prompts restarted."""
        owners = set(owners)
        if not owners:
            return 0
        restart: list[tuple[Cohort, str]] = []
        for co in self.cohorts.values():
            for pid in [pid for pid, g in co.groups.items() if _made_by(g.samples, owners)]:
                del co.groups[pid]
                restart.append((co, pid))
            for g in co.dropped:  # never trained: only their record is kept, without the lost samples
                keep = [i for i, x in enumerate(g.samples) if not _made_by([x], owners)]
                g.samples, g.advantages = [g.samples[i] for i in keep], [g.advantages[i] for i in keep]
        dead_items: set[tuple[int, str]] = set()
        for (c, pid), st in list(self.inflight.items()):
            if any(_made_by(r, owners) for r in st.rounds()):
                del self.inflight[(c, pid)]
                dead_items.add((c, pid))
                restart.append((self.cohorts[c], pid))
        if dead_items:
            self._cancel_items(dead_items)
        for co, pid in restart:
            self.prompt_counts.prompts_reissued += 1
            p = self.prompts.get(pid)
            self._start_prompt(co, p, self.strategy.first_round_sizes([p], self.estimator)[0], new_draw=False)
        return len(restart)

    def _cancel_items(self, keys: set[tuple[int, str]]) -> None:
        """Cancel the outstanding item (ready, held at a barrier or leased) of each (cohort, prompt)."""
        cancelled = len(self.ready.remove_if(lambda it: (it.cohort, it.prompt_id) in keys))
        for co in {c for c, _ in keys}:
            held = self.cohorts[co].held
            self.cohorts[co].held = [it for it in held if (it.cohort, it.prompt_id) not in keys]
            cancelled += len(held) - len(self.cohorts[co].held)
        for c, pid in keys:
            ids = self.leases.find(c, pid)
            self.leases.cancel(ids)
            cancelled += len(ids)
        for c, _ in keys:
            self.cohorts[c].running_items -= 1
        if cancelled != len(keys):
            raise SchedulerError(f"lost payloads: {len(keys)} prompt(s) in flight held {cancelled} outstanding items")

    def return_cohort(self, result: CohortResult, owners: Collection[str]) -> int:
        """The last cohort taken could not be trained: payloads of `owners` were gone when the learner
        fetched them. It is open again with its other groups as they were; the prompts with a lost
        sample are sampled again (lose_owners). Prompts restarted."""
        if result.index != self.first_untaken - 1:
            raise SchedulerError(f"only the last cohort taken ({self.first_untaken - 1}) can come back, "
                                 f"not {result.index}")
        co = Cohort(result.index, len(result.groups), [g.prompt_id for g in result.groups] +
                    [g.prompt_id for g in result.dropped], {g.prompt_id: g for g in result.groups},
                    list(result.dropped), draws=result.draws, cap_hit=result.dapo_cap_hit,
                    samples=result.samples_generated, skipped=result.skipped)
        self.cohorts = {result.index: co, **self.cohorts}
        self.first_untaken -= 1
        self.prompt_counts.prompts_trained -= len(result.groups)
        return self.lose_owners(owners)

    def _finish(self, co: Cohort, st: PromptState) -> None:
        del self.inflight[(co.index, st.prompt.prompt_id)]
        self.estimator.update(st.prompt.prompt_id, st.pool_size, st.num_pos)
        group = self.strategy.finalize(st)
        if self.strategy.should_replace(group):
            cap = math.ceil(self.algo.dapo_max_draws_factor * co.target)
            if co.draws < cap:
                replacement = self._draw(co, set(co.admitted))
                if replacement is not None:
                    group.dropped = True
                    co.dropped.append(group)
                    self.prompt_counts.prompts_dropped += 1
                    self._start_prompt(co, self.prompts.get(replacement), self.algo.n)
                    return
            co.cap_hit = True  # fill the batch with the zero-signal group; never crash
        co.groups[group.prompt_id] = group

    # ------------------------------------------------------------------------------------------
    # learner side
    # ------------------------------------------------------------------------------------------

    def cohort_status(self, index: int) -> Signal:
        """READY | PENDING | END (no such cohort will ever exist)."""
        if self.end_cohort is not None and index >= self.end_cohort:
            return Signal.END
        if self.total_steps is not None and index >= self.total_steps:
            return Signal.END
        co = self.cohorts.get(index)
        if co is not None and co.complete:
            return Signal.READY
        return Signal.PENDING

    def take_cohort(self, index: int) -> CohortResult:
        if index != self.first_untaken:
            raise SchedulerError(f"cohorts are taken in order: expected {self.first_untaken}, asked for {index}")
        status = self.cohort_status(index)
        if status != Signal.READY:
            raise SchedulerError(f"cohort {index} is not ready ({status})")
        co = self.cohorts.pop(index)
        self.first_untaken += 1
        groups = [co.groups[pid] for pid in co.admitted if pid in co.groups]
        self.prompt_counts.prompts_trained += len(groups)
        return CohortResult(index, groups, co.dropped, co.draws, co.cap_hit, co.samples, co.skipped)

    # ------------------------------------------------------------------------------------------
    # end of run, accounting, checkpoint
    # ------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Cancel every outstanding lease and every prompt still in flight."""
        self.leases.cancel_all()
        self.ready.clear()
        self.prompt_counts.prompts_cancelled += len(self.inflight)
        self.inflight.clear()
        for co in self.cohorts.values():
            self.prompt_counts.prompts_cancelled += len(co.groups)
            co.groups.clear()
            co.held.clear()

    def held_samples(self):
        """Every sample the scheduler holds: finished groups (kept and dropped) of open cohorts, pools in flight."""
        for co in self.cohorts.values():
            for g in co.groups.values():
                yield from g.samples
            for g in co.dropped:
                yield from g.samples
        for st in self.inflight.values():
            yield from st.pool

    def outstanding(self) -> int:
        return len(self.leases)

    def check_accounting(self) -> dict:
        a = self.prompt_counts
        finished_untaken = sum(len(co.groups) for co in self.cohorts.values())
        items_ok = self.leases.balanced()
        prompts_ok = a.prompts_drawn == (a.prompts_trained + a.prompts_dropped + a.prompts_cancelled
                                         + len(self.inflight) + finished_untaken)
        out = scheduler_state.accounting_to_dict(self.leases.counts, a)
        out.update(outstanding=len(self.leases), inflight=len(self.inflight), finished_untaken=finished_untaken,
                   items_ok=items_ok, prompts_ok=prompts_ok)
        if not (items_ok and prompts_ok):
            raise SchedulerError(f"accounting invariant broken: {out}")
        return out

    def state_dict(self) -> dict:
        """Everything needed to resume (queue.json): leased work is saved as not yet done (it goes out again)."""
        return scheduler_state.save(self)

    def load_state_dict(self, state: dict) -> None:
        missing = {st["prompt_id"] for st in state["inflight"] if st["prompt_id"] not in self.prompts}
        if missing:
            raise SchedulerError(
                f"checkpointed queue names prompts not in this dataset (e.g. {sorted(missing)[0]}): "
                "the checkpoint was made with different data"
            )
        self._queue_saved_work(scheduler_state.restore(self, state))

    def _queue_saved_work(self, work: list[dict]) -> None:
        """After a restore: the saved work goes out again as new items; in sync mode only the lowest
        outstanding round of a cohort is ready, the rest waits at the round barrier."""
        work = sorted(work, key=lambda w: (w["cohort"], w["round"]))
        for w in work:
            co = self.cohorts[w["cohort"]]
            item = self._new_item(self.prompts.get(w["prompt_id"]), w["cohort"], w["round"], w["num_samples"])
            co.running_items += 1
            self._push(item)
        if self.barrier:
            lowest: dict[int, int] = {}
            for w in work:
                lowest[w["cohort"]] = min(lowest.get(w["cohort"], w["round"]), w["round"])
            for item in self.ready.remove_if(lambda it: it.round > lowest[it.cohort]):
                self.cohorts[item.cohort].held.append(item)
