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

Leases: a leased item belongs to one sampler until it reports, its lease expires, or the sampler is
released (dead); the work then goes out again as a new item. Accounting invariant, checked by
`check_accounting`: issued = completed + reissued + cancelled + outstanding, and every prompt drawn
from the data is in exactly one place (in flight, finished in an untaken cohort, trained, dropped by
DAPO, or cancelled at shutdown).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.prompt_order import PromptOrder
from ada_ray.algo.strategies import PromptState, Strategy, make_strategy, sample_from_dict, sample_to_dict
from ada_ray.algo.types import Group, Prompt, Sample, Signal, WorkItem

if TYPE_CHECKING:
    from ada_ray.config import AlgoConfig


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


@dataclass
class _Cohort:
    index: int
    target: int = 0  # groups this cohort must deliver
    admitted: list[str] = field(default_factory=list)  # every prompt drawn into it, in order
    groups: dict[str, Group] = field(default_factory=dict)
    dropped: list[Group] = field(default_factory=list)
    draws: int = 0
    cap_hit: bool = False
    samples: int = 0
    running_items: int = 0  # items pending or leased (for the round barrier)
    held: list[WorkItem] = field(default_factory=list)  # next-round items waiting at the barrier

    @property
    def complete(self) -> bool:
        return self.target > 0 and len(self.groups) >= self.target


@dataclass
class Accounting:
    issued: int = 0
    completed: int = 0
    reissued: int = 0
    cancelled: int = 0
    late_reports: int = 0  # reports for items whose lease had already ended
    prompts_drawn: int = 0
    prompts_trained: int = 0
    prompts_dropped: int = 0
    prompts_cancelled: int = 0


class SchedulerError(RuntimeError):
    pass


class WorkScheduler:
    def __init__(
        self,
        prompts: Sequence[Prompt],
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
        self.prompts = {p.prompt_id: p for p in prompts}
        if len(self.prompts) != len(prompts):
            raise ValueError("duplicate prompt ids in the training set")
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
            for p in prompts:  # offline pass rates (prepare-data) seed the difficulty memory
                if p.prior_pass_rate is not None:
                    self.estimator.seed_prior(p.prompt_id, p.prior_pass_rate, algo.prior_weight)
        self.order = PromptOrder([p.prompt_id for p in prompts], prompt_order, seed, total_epochs)
        self.version = 0
        self.next_cohort = 0  # next cohort index to open
        self.first_untaken = 0  # cohorts below this have been handed to the learner
        self.data_exhausted = False
        self.deferred: list[str] = []  # prompts that came up again inside one cohort (epoch boundary)
        self.end_cohort: Optional[int] = None  # first cohort index that will never exist
        self.cohorts: dict[int, _Cohort] = {}
        self.inflight: dict[str, PromptState] = {}  # key: f"{cohort}:{prompt_id}"
        self.ready: list[tuple[int, int, int, WorkItem]] = []  # heap (cohort, new, seq, item)
        self.leases: dict[int, tuple[WorkItem, str, float]] = {}  # item_id -> (item, sampler, deadline)
        self.acct = Accounting()
        self._next_item_id = 0
        self._seq = 0
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

    def _draw(self, co: "_Cohort") -> Optional[Prompt]:
        """The next prompt for cohort `co`. A cohort never holds a prompt twice: across an epoch
        boundary the same prompt can come up again; it is deferred to the next cohort."""
        taken = set(co.admitted)
        if len(taken) >= len(self.prompts):
            return None  # the cohort holds every prompt: the loop below would defer forever
        for i, pid in enumerate(self.deferred):
            if pid not in taken:
                del self.deferred[i]
                self.acct.prompts_drawn += 1
                return self.prompts[pid]
        while not self.data_exhausted:
            nxt = self.order.next(self.estimator)
            if nxt is None:
                self.data_exhausted = True
                break
            if nxt[0] in taken:
                self.deferred.append(nxt[0])
                continue
            self.acct.prompts_drawn += 1
            return self.prompts[nxt[0]]
        return None

    def _open(self, index: int) -> None:
        co = _Cohort(index)
        drawn: list[Prompt] = []
        while len(drawn) < self.batch_prompts:
            p = self._draw(co)
            if p is None:
                break
            drawn.append(p)
            co.admitted.append(p.prompt_id)
        co.admitted = []
        if not drawn:
            self.end_cohort = index
            return
        self.cohorts[index] = co
        co.target = len(drawn)
        sizes = self.strategy.first_round_sizes(drawn, self.estimator)
        for p, k in zip(drawn, sizes):
            self._start_prompt(co, p, k)

    def _start_prompt(self, co: _Cohort, p: Prompt, k: int) -> None:
        co.admitted.append(p.prompt_id)
        co.draws += 1
        key = f"{co.index}:{p.prompt_id}"
        if key in self.inflight:
            raise SchedulerError(f"prompt {p.prompt_id} admitted twice into cohort {co.index}")
        self.inflight[key] = PromptState(p, co.index, self.algo.positive_threshold)
        self._push(self._new_item(p, co.index, 0, k))
        co.running_items += 1

    def _new_item(self, p: Prompt, cohort: int, round_: int, k: int) -> WorkItem:
        self._next_item_id += 1
        return WorkItem(self._next_item_id, p.prompt_id, p.token_ids, p.answer, k, cohort, round_,
                        item_seed(self.seed, p.prompt_id, cohort, round_), self.version)

    def _push(self, item: WorkItem) -> None:
        self._seq += 1
        heapq.heappush(self.ready, (item.cohort, 0 if item.round > 0 else 1, self._seq, item))

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
        while self.ready and len(out) < max_items:
            if max_samples is not None and out and samples + self.ready[0][3].num_samples > max_samples:
                break
            *_, item = heapq.heappop(self.ready)
            samples += item.num_samples
            item = dataclasses.replace(item, version=self.version)
            self.leases[item.item_id] = (item, sampler_id, now + self.lease_timeout_s)
            self.acct.issued += 1
            out.append(item)
        return out

    def has_ready_work(self) -> bool:
        return bool(self.ready)

    def _requeue(self, item: WorkItem) -> None:
        self._next_item_id += 1
        self._push(dataclasses.replace(item, item_id=self._next_item_id))

    def expire(self, now: float) -> int:
        dead = [iid for iid, (_, _, deadline) in self.leases.items() if deadline < now]
        for iid in dead:
            item, _, _ = self.leases.pop(iid)
            self.acct.reissued += 1
            self._requeue(item)
        return len(dead)

    def release_sampler(self, sampler_id: str) -> int:
        """A sampler died: every item it holds goes out again."""
        mine = [iid for iid, (_, sid, _) in self.leases.items() if sid == sampler_id]
        for iid in mine:
            item, _, _ = self.leases.pop(iid)
            self.acct.reissued += 1
            self._requeue(item)
        return len(mine)

    def report(self, sampler_id: str, item_id: int, samples: list[Sample]) -> bool:
        """A sampler's scored samples for one item. False when the lease had already ended."""
        lease = self.leases.pop(item_id, None)
        if lease is None:
            self.acct.late_reports += 1
            return False
        item, _, _ = lease
        if len(samples) != item.num_samples:
            self.leases[item_id] = lease
            raise SchedulerError(
                f"sampler {sampler_id} reported {len(samples)} samples for item {item_id}, "
                f"which asked for {item.num_samples}"
            )
        self.acct.completed += 1
        for s in samples:
            s.round = item.round
        co = self.cohorts[item.cohort]
        co.samples += len(samples)
        co.running_items -= 1
        st = self.inflight[f"{item.cohort}:{item.prompt_id}"]
        st.add_round(samples)
        k = self.strategy.next_round_size(st)
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

    def _finish(self, co: _Cohort, st: PromptState) -> None:
        del self.inflight[f"{co.index}:{st.prompt.prompt_id}"]
        self.estimator.update(st.prompt.prompt_id, st.pool_size, len(st.pos))
        group = self.strategy.finalize(st)
        if self.strategy.replaces_zero_signal and self.strategy.is_zero_signal(group):  # type: ignore[attr-defined]
            cap = math.ceil(self.algo.dapo_max_draws_factor * co.target)
            if co.draws < cap:
                replacement = self._draw(co)
                if replacement is not None:
                    group.dropped = True
                    co.dropped.append(group)
                    self.acct.prompts_dropped += 1
                    self._start_prompt(co, replacement, self.algo.n)
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
        self.acct.prompts_trained += len(groups)
        return CohortResult(index, groups, co.dropped, co.draws, co.cap_hit, co.samples)

    # ------------------------------------------------------------------------------------------
    # end of run, accounting, checkpoint
    # ------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Cancel every outstanding lease and every prompt still in flight."""
        self.acct.cancelled += len(self.leases)
        self.leases.clear()
        self.ready.clear()
        self.acct.prompts_cancelled += len(self.inflight)
        self.inflight.clear()
        for co in self.cohorts.values():
            self.acct.prompts_cancelled += len(co.groups)
            co.groups.clear()
            co.held.clear()

    def outstanding(self) -> int:
        return len(self.leases)

    def check_accounting(self) -> dict:
        a = self.acct
        finished_untaken = sum(len(co.groups) for co in self.cohorts.values())
        items_ok = a.issued == a.completed + a.reissued + a.cancelled + len(self.leases)
        prompts_ok = a.prompts_drawn == (a.prompts_trained + a.prompts_dropped + a.prompts_cancelled
                                         + len(self.inflight) + finished_untaken)
        out = dataclasses.asdict(a)
        out.update(outstanding=len(self.leases), inflight=len(self.inflight), finished_untaken=finished_untaken,
                   items_ok=items_ok, prompts_ok=prompts_ok)
        if not (items_ok and prompts_ok):
            raise SchedulerError(f"accounting invariant broken: {out}")
        return out

    def state_dict(self) -> dict:
        """Everything needed to resume: leased work is saved as not yet done (it goes out again)."""
        outstanding = [item for item, _, _ in self.leases.values()]
        outstanding += [entry[3] for entry in self.ready]
        for co in self.cohorts.values():
            outstanding += co.held
        acct = dataclasses.replace(self.acct)
        acct.reissued += len(self.leases)  # leases die with this process; their work goes out again
        return {
            "version": self.version, "next_cohort": self.next_cohort, "first_untaken": self.first_untaken,
            "data_exhausted": self.data_exhausted, "end_cohort": self.end_cohort, "deferred": list(self.deferred),
            "next_item_id": self._next_item_id,
            "estimator": self.estimator.state_dict(), "order": self.order.state_dict(),
            "accounting": dataclasses.asdict(acct),
            "cohorts": [{
                "index": co.index, "target": co.target, "admitted": list(co.admitted), "draws": co.draws,
                "cap_hit": co.cap_hit, "samples": co.samples,
                "groups": [_group_to_dict(g) for g in co.groups.values()],
                "dropped": [_group_to_dict(g) for g in co.dropped],
            } for co in self.cohorts.values()],
            "inflight": [st.to_state() for st in self.inflight.values()],
            "work": [{"prompt_id": it.prompt_id, "cohort": it.cohort, "round": it.round,
                      "num_samples": it.num_samples} for it in outstanding],
        }

    def load_state_dict(self, state: dict) -> None:
        missing = {st["prompt_id"] for st in state["inflight"]} - set(self.prompts)
        if missing:
            raise SchedulerError(
                f"checkpointed queue names prompts not in this dataset (e.g. {sorted(missing)[0]}): "
                "the checkpoint was made with different data"
            )
        self.version = state["version"]
        self.next_cohort = state["next_cohort"]
        self.first_untaken = state["first_untaken"]
        self.data_exhausted = state["data_exhausted"]
        self.end_cohort = state["end_cohort"]
        self.deferred = list(state.get("deferred", []))
        self._next_item_id = state["next_item_id"]
        self.estimator.load_state_dict(state["estimator"])
        self.order.load_state_dict(state["order"])
        self.acct = Accounting(**state["accounting"])
        self.cohorts, self.inflight, self.ready, self.leases = {}, {}, [], {}
        for c in state["cohorts"]:
            co = _Cohort(c["index"], c["target"], list(c["admitted"]), draws=c["draws"], cap_hit=c["cap_hit"],
                         samples=c["samples"])
            for g in c["groups"]:
                grp = _group_from_dict(g)
                co.groups[grp.prompt_id] = grp
            co.dropped = [_group_from_dict(g) for g in c["dropped"]]
            self.cohorts[co.index] = co
        for s in state["inflight"]:
            st = PromptState(self.prompts[s["prompt_id"]], s["cohort"], self.algo.positive_threshold,
                             [sample_from_dict(x) for x in s["pool"]], s["rounds_done"], list(s["round0_rewards"]))
            self.inflight[f"{st.cohort}:{st.prompt.prompt_id}"] = st
        work = sorted(state["work"], key=lambda w: (w["cohort"], w["round"]))
        for w in work:
            co = self.cohorts[w["cohort"]]
            item = self._new_item(self.prompts[w["prompt_id"]], w["cohort"], w["round"], w["num_samples"])
            co.running_items += 1
            self._push(item)
        # the round barrier: only the lowest outstanding round of a cohort may run
        if self.barrier:
            kept = []
            for entry in self.ready:
                item = entry[3]
                lowest = min(w["round"] for w in work if w["cohort"] == item.cohort)
                if item.round > lowest:
                    self.cohorts[item.cohort].held.append(item)
                else:
                    kept.append(entry)
            self.ready = kept
            heapq.heapify(self.ready)


def _group_to_dict(g: Group) -> dict:
    d = dataclasses.asdict(g)
    d["samples"] = [sample_to_dict(s) for s in g.samples]
    return d


def _group_from_dict(d: dict) -> Group:
    d = dict(d)
    d["samples"] = [sample_from_dict(s) for s in d["samples"]]
    return Group(**d)
