"""A sharded PromptQueue, the pure part: which shard a prompt lives in, each shard's view of the
prompts and share of a cohort, and how the shards' answers merge into one (trainer.queue_shards).

One PromptQueue actor tops out at a few thousand work items a second on one core. With K shards,
prompt ids are hashed (blake2b, stable across processes and runs) into K disjoint sets; shard k is
an ordinary PromptQueue over its set with its share of trainer.batch_prompts (B // K, plus one for
k < B % K), and a coordinator actor (actors/queue_coordinator.py) gives the driver one queue: cohort
c is the concatenation of every shard's cohort c, taken only once all of them are ready. The
staleness bound holds per shard, so it holds for the merged cohort. No Ray here.
"""

from __future__ import annotations

import hashlib
from typing import Iterator, Optional, Sequence, Union

from ada_ray.algo.prompt_source import PromptSource, as_source
from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Prompt, Signal
from ada_ray.errors import InputError


class ShardStateError(InputError, ValueError):
    """A saved queue state does not fit this queue's number of shards."""


def shard_of(prompt_id: str, shards: int) -> int:
    """The shard that holds `prompt_id` (stable: blake2b of the id, not Python's salted hash())."""
    if shards == 1:
        return 0
    h = hashlib.blake2b(prompt_id.encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % shards


def batch_shares(batch_prompts: int, shards: int) -> list[int]:
    """Each shard's part of a cohort: as even as can be, the larger parts first; they sum to B."""
    if shards < 1 or batch_prompts < shards:
        raise ValueError(f"{batch_prompts} prompts per step cannot be split over {shards} shards "
                         "(every shard needs at least one)")
    base, extra = divmod(batch_prompts, shards)
    return [base + (1 if k < extra else 0) for k in range(shards)]


class ShardSource:
    """A PromptSource view of the prompts of one shard: ids in dataset order, lookups delegated.
    Pickles as (source, shard, shards): a PromptTable travels as its path, and the id list is
    rebuilt in the process that uses it (token ids are never read here)."""

    def __init__(self, source: PromptSource, shard: int, shards: int):
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} is not in [0, {shards})")
        self.source, self.shard, self.shards = source, shard, shards
        self._ids: Optional[list[str]] = None
        self._idset: Optional[set[str]] = None

    def __reduce__(self):
        return (ShardSource, (self.source, self.shard, self.shards))

    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = [pid for pid in self.source.ids() if shard_of(pid, self.shards) == self.shard]
        return self._ids

    def __len__(self) -> int:
        return len(self.ids())

    def __contains__(self, prompt_id: object) -> bool:
        if self._idset is None:
            self._idset = set(self.ids())
        return prompt_id in self._idset

    def _check(self, prompt_id: str) -> None:
        if prompt_id not in self:
            raise KeyError(prompt_id)

    def get(self, prompt_id: str) -> Prompt:
        self._check(prompt_id)
        return self.source.get(prompt_id)

    def get_many(self, prompt_ids: Sequence[str]) -> list[Prompt]:
        for pid in prompt_ids:
            self._check(pid)
        return self.source.get_many(prompt_ids)

    def priors(self) -> Iterator[tuple[str, float]]:
        return ((pid, r) for pid, r in self.source.priors() if shard_of(pid, self.shards) == self.shard)


def shard_prompts(prompts: Union[PromptSource, Sequence[Prompt]], shard: int, shards: int):
    """What shard `shard` is built over: a list of Prompts is filtered into a (smaller) list, so each
    shard actor receives only its own prompts; any other PromptSource becomes a ShardSource view."""
    if isinstance(prompts, (list, tuple)):
        as_source(prompts)  # duplicate ids are refused here too
        return [p for p in prompts if shard_of(p.prompt_id, shards) == shard]
    return ShardSource(as_source(prompts), shard, shards)


def shard_estimator_state(state: Optional[dict], shard: int, shards: int) -> Optional[dict]:
    """A PassRateEstimator state with only the prompts of one shard."""
    if not state:
        return state
    return {**state, "stats": {pid: v for pid, v in state["stats"].items() if shard_of(pid, shards) == shard}}


# ----------------------------------------------------------------------------------------------
# merging the shards' answers
# ----------------------------------------------------------------------------------------------


def merge_cohorts(index: int, parts: Sequence[CohortResult]) -> CohortResult:
    """Every shard's cohort `index` as one: groups and dropped groups in shard order, draws and
    samples and skips summed, the DAPO cap hit when any shard hit it."""
    for p in parts:
        if p.index != index:
            raise ValueError(f"a shard answered cohort {p.index} for cohort {index}")
    return CohortResult(index, [g for p in parts for g in p.groups], [g for p in parts for g in p.dropped],
                        sum(p.draws for p in parts), any(p.dapo_cap_hit for p in parts),
                        sum(p.samples_generated for p in parts), sum(p.skipped for p in parts))


def split_cohort(result: CohortResult, shards: int) -> list[CohortResult]:
    """A merged cohort back into each shard's part (what `return_cohort` gives each shard): groups and
    dropped groups by their prompt's shard, draws as each part's prompts; the generated samples and
    skips are counters a shard only sums, so the first part carries them."""
    parts = []
    for k in range(shards):
        groups = [g for g in result.groups if shard_of(g.prompt_id, shards) == k]
        dropped = [g for g in result.dropped if shard_of(g.prompt_id, shards) == k]
        parts.append(CohortResult(result.index, groups, dropped, len(groups) + len(dropped), result.dapo_cap_hit,
                                  result.samples_generated if k == 0 else 0, result.skipped if k == 0 else 0))
    return parts


def merge_wait(statuses: Sequence[Signal]) -> Signal:
    """The coordinator's answer from every shard's readiness: END when any shard has no such
    cohort (the run ends for all of them), READY when all are ready, else TIMEOUT."""
    if any(s == Signal.END for s in statuses):
        return Signal.END
    if all(s == Signal.READY for s in statuses):
        return Signal.READY
    return Signal.TIMEOUT


def merge_accounting(parts: Sequence[dict]) -> dict:
    """The shards' accountings as one: counters summed, the *_ok checks and-ed."""
    out: dict = {}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, bool):
                out[k] = out.get(k, True) and v
            else:
                out[k] = out.get(k, 0) + v
    return out


def merge_stats(parts: Sequence[dict]) -> dict:
    """The shards' queue stats as one: counts and busy time summed; open cohorts the most of any
    shard, the version the lowest (every shard gets each version at once), per-name counts summed
    per name; `shards` the count."""
    out: dict = {}
    for part in parts:
        for k, v in part.items():
            if k == "open_cohorts":
                out[k] = max(out.get(k, v), v)
            elif k == "version":
                out[k] = min(out.get(k, v), v)
            elif isinstance(v, dict):  # per-name counts (leased_by): summed name by name
                merged = out.setdefault(k, {})
                for name, n in v.items():
                    merged[name] = merged.get(name, 0) + n
            else:
                out[k] = out.get(k, 0) + v
    out["shards"] = len(parts)
    return out


def merge_resources(parts: Sequence[dict]) -> dict:
    """CPU seconds and memory of every shard process, summed (a process's own `pid` is left out)."""
    out: dict = {}
    for part in parts:
        for k, v in part.items():
            if k != "pid":
                out[k] = out.get(k, 0.0) + v
    return out


def merge_estimator_states(parts: Sequence[dict]) -> dict:
    """The shards' PassRateEstimator states as one (their prompt sets are disjoint)."""
    if not parts:
        raise ValueError("no estimator states to merge")
    stats: dict = {}
    for part in parts:
        if (part["alpha"], part["beta"], part["lam"]) != (parts[0]["alpha"], parts[0]["beta"], parts[0]["lam"]):
            raise ValueError("the shards' estimators have different parameters")
        stats.update(part["stats"])
    return {**parts[0], "stats": stats}


def sharded_state(states: Sequence[dict]) -> dict:
    """queue.json of a sharded queue (one shard keeps a single PromptQueue's format unchanged)."""
    return {"shards": list(states), "queue_shards": len(states)}


def shard_states(state: dict, shards: int) -> list[dict]:
    """The per-shard states in a saved queue state, checked against this queue's shard count."""
    saved = len(state["shards"]) if "shards" in state else 1
    if "shards" in state and state.get("queue_shards", saved) != saved:
        raise ShardStateError(f"saved queue state is inconsistent: queue_shards = {state['queue_shards']} "
                              f"but {saved} shard states")
    if saved != shards:
        raise ShardStateError(f"the checkpointed queue was saved with trainer.queue_shards = {saved}, this run has "
                              f"trainer.queue_shards = {shards}: prompts live in different shards; resume with "
                              f"trainer.queue_shards={saved}")
    return list(state["shards"]) if "shards" in state else [state]
