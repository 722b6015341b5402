"""The work scheduler's checkpoint: the records it saves and their JSON form.

Owns the records a queue checkpoint holds besides the lease table's counters (`Cohort`, the prompt
counters `PromptCounts`), the dict form of a Sample, a Group, an in-flight prompt and a cohort, and
the bodies of `WorkScheduler.state_dict` / `load_state_dict` (`save` / `restore`). The format is
the queue.json every checkpoint holds: keys and their order are kept as they are, so an old
queue.json loads (tests/algo/data/queue_states_before_split.json pins it). Leased work is saved as
not yet done; the scheduler queues the saved work again on load. Pure, no Ray. `save` / `restore`
read and set the scheduler's fields through the `SavedScheduler` Protocol, so this module does not
import scheduler.py (which imports it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.leases import ItemCounts, LeaseTable
from ada_ray.algo.prompt_order import PromptOrder
from ada_ray.algo.prompt_source import PromptSource
from ada_ray.algo.prompt_state import PromptState
from ada_ray.algo.types import Group, Prompt, Sample, WorkItem


@dataclass
class Cohort:
    """The prompts trained at one step, while they are sampled (cohort c: policy version c)."""

    index: int
    target: int = 0  # groups this cohort must deliver
    admitted: list[str] = field(default_factory=list)  # every prompt drawn into it, in order
    groups: dict[str, Group] = field(default_factory=dict)
    dropped: list[Group] = field(default_factory=list)
    draws: int = 0
    cap_hit: bool = False
    samples: int = 0
    running_items: int = 0  # items pending or leased (for the round barrier); not saved
    skipped: int = 0  # prompts the data cursor passed over (ada_budget's parked prompts); a metric, not saved
    held: list[WorkItem] = field(default_factory=list)  # next-round items waiting at the barrier

    @property
    def complete(self) -> bool:
        return self.target > 0 and len(self.groups) >= self.target


@dataclass
class PromptCounts:
    """The prompt counters (the last four keys of a checkpoint's "accounting")."""

    prompts_drawn: int = 0
    prompts_trained: int = 0
    prompts_dropped: int = 0
    prompts_cancelled: int = 0
    prompts_reissued: int = 0  # prompts sampled again from round 0: their payloads died with a sampler


_ITEM_KEYS = [f.name for f in dataclasses.fields(ItemCounts)]


def sample_to_dict(s: Sample) -> dict:
    return {"prompt_id": s.prompt_id, "completion_ids": list(s.completion_ids),
            "behaviour_logprobs": list(s.behaviour_logprobs), "reward": s.reward, "version": s.version,
            "round": s.round, "text": s.text, "finish_reason": s.finish_reason, "reward_error": s.reward_error}


def sample_from_dict(d: dict) -> Sample:
    return Sample(**d)


def group_to_dict(g: Group) -> dict:
    d = dataclasses.asdict(g)
    d["samples"] = [sample_to_dict(s) for s in g.samples]
    return d


def group_from_dict(d: dict) -> Group:
    d = dict(d)
    d["samples"] = [sample_from_dict(s) for s in d["samples"]]
    return Group(**d)


def prompt_state_to_dict(st: PromptState) -> dict:
    return {"prompt_id": st.prompt.prompt_id, "cohort": st.cohort, "rounds_done": st.rounds_done,
            "round0_rewards": list(st.round0_rewards), "pool": [sample_to_dict(s) for s in st.pool]}


def prompt_state_from_dict(d: dict, prompt: Prompt, threshold: float) -> PromptState:
    return PromptState(prompt, d["cohort"], threshold, [sample_from_dict(x) for x in d["pool"]], d["rounds_done"],
                       list(d["round0_rewards"]))


def cohort_to_dict(co: Cohort) -> dict:
    """A cohort's saved form: its running items and barrier are rebuilt from the saved work."""
    return {"index": co.index, "target": co.target, "admitted": list(co.admitted), "draws": co.draws,
            "cap_hit": co.cap_hit, "samples": co.samples,
            "groups": [group_to_dict(g) for g in co.groups.values()],
            "dropped": [group_to_dict(g) for g in co.dropped]}


def cohort_from_dict(c: dict) -> Cohort:
    groups = [group_from_dict(g) for g in c["groups"]]
    return Cohort(c["index"], c["target"], list(c["admitted"]), {g.prompt_id: g for g in groups},
                  [group_from_dict(g) for g in c["dropped"]], draws=c["draws"], cap_hit=c["cap_hit"],
                  samples=c["samples"])


def accounting_to_dict(items: ItemCounts, prompts: PromptCounts) -> dict:
    return {**dataclasses.asdict(items), **dataclasses.asdict(prompts)}


def accounting_from_dict(d: dict) -> tuple[ItemCounts, PromptCounts]:
    """Both counter sets; a key that is neither is refused (TypeError), a missing one is 0."""
    items = ItemCounts(**{k: v for k, v in d.items() if k in _ITEM_KEYS})
    return items, PromptCounts(**{k: v for k, v in d.items() if k not in _ITEM_KEYS})


class SavedScheduler(Protocol):
    """The fields of a WorkScheduler that its checkpoint holds (and `restore` sets)."""

    version: int
    next_cohort: int
    first_untaken: int
    data_exhausted: bool
    end_cohort: Optional[int]
    deferred: list[str]
    next_item_id: int
    estimator: PassRateEstimator
    order: PromptOrder
    leases: LeaseTable
    lease_timeout_s: float
    prompt_counts: "PromptCounts"
    cohorts: dict[int, "Cohort"]
    inflight: dict[tuple[int, str], PromptState]
    ready: list
    prompts: PromptSource
    algo: Any


def save(s: SavedScheduler) -> dict:
    """`WorkScheduler.state_dict`: everything needed to resume. Leased work is saved as not yet
    done (it goes out again), in the order: leased, ready, held at a round barrier."""
    outstanding = s.leases.items() + list(s.ready)
    for co in s.cohorts.values():
        outstanding += co.held
    return {
        "version": s.version, "next_cohort": s.next_cohort, "first_untaken": s.first_untaken,
        "data_exhausted": s.data_exhausted, "end_cohort": s.end_cohort, "deferred": list(s.deferred),
        "next_item_id": s.next_item_id,
        "estimator": s.estimator.state_dict(), "order": s.order.state_dict(),
        "accounting": accounting_to_dict(s.leases.counts_as_saved(), s.prompt_counts),
        "cohorts": [cohort_to_dict(co) for co in s.cohorts.values()],
        "inflight": [prompt_state_to_dict(st) for st in s.inflight.values()],
        "work": [{"prompt_id": it.prompt_id, "cohort": it.cohort, "round": it.round,
                  "num_samples": it.num_samples} for it in outstanding],
    }


def restore(s: SavedScheduler, state: dict) -> list[dict]:
    """`WorkScheduler.load_state_dict`, all but queueing the work: sets every saved field of `s`
    (no leases, no ready work) and returns the saved work for the scheduler to queue again."""
    s.version = state["version"]
    s.next_cohort = state["next_cohort"]
    s.first_untaken = state["first_untaken"]
    s.data_exhausted = state["data_exhausted"]
    s.end_cohort = state["end_cohort"]
    s.deferred = list(state.get("deferred", []))
    s.next_item_id = state["next_item_id"]
    s.estimator.load_state_dict(state["estimator"])
    s.order.load_state_dict(state["order"])
    items, s.prompt_counts = accounting_from_dict(state["accounting"])
    s.leases = LeaseTable(s.lease_timeout_s, items)
    s.cohorts = {}
    for c in state["cohorts"]:
        co = cohort_from_dict(c)
        s.cohorts[co.index] = co
    s.inflight = {}
    for d in state["inflight"]:
        st = prompt_state_from_dict(d, s.prompts.get(d["prompt_id"]), s.algo.positive_threshold)
        s.inflight[(st.cohort, st.prompt.prompt_id)] = st
    s.ready.clear()
    return state["work"]
