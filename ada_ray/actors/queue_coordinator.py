"""A sharded PromptQueue (trainer.queue_shards = K > 1): K ordinary PromptQueue actors, each over the
prompts whose id hashes to it (algo/queue_shards.py) with its share of every cohort, and one
QueueCoordinator that gives the driver the queue's driver-facing methods. Sampler i leases from and
reports to shard i % K directly, so the work items never pass through the coordinator; the
coordinator only forwards the driver's calls and merges the answers (the merging is pure, in
algo/queue_shards.py).

A cohort is taken from the shards only once every shard reports it ready (`PromptQueue.cohort_ready`
does not take), so a timed-out wait leaves every shard's part where it was. When any shard has no
cohort `index` (its data ran out first), the run ends for all of them: Signal.END from then on.

`build_queue` builds either layout (K == 1: the single PromptQueue, no coordinator, as before); the
Runtime and the scale bench both use it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Optional, Sequence, Union

import ray

from ada_ray.actors.prompt_queue import PromptQueue
from ada_ray.algo import queue_shards as qs
from ada_ray.algo.prompt_source import as_source
from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Signal
from ada_ray.config import ConfigError, from_dict


@ray.remote
class QueueCoordinator:
    def __init__(self, shards: list):
        self.shards = list(shards)
        self.end: Optional[int] = None  # first cohort index some shard will never have

    async def _all(self, method: str, *args) -> list:
        return list(await asyncio.gather(*[getattr(s, method).remote(*args) for s in self.shards]))

    async def wait_cohort(self, index: int, timeout_s: float):
        """Every shard's cohort `index`, merged (Signal.END when some shard has none, Signal.TIMEOUT
        when not all are ready within `timeout_s`; nothing is taken then)."""
        if self.end is not None and index >= self.end:
            return Signal.END
        status = qs.merge_wait(await self._all("cohort_ready", index, timeout_s))
        if status == Signal.END:
            self.end = index if self.end is None else min(self.end, index)
        if status != Signal.READY:
            return status
        parts = await self._all("wait_cohort", index, 0.0)
        if not all(isinstance(p, CohortResult) for p in parts):  # stopped meanwhile
            self.end = index
            return Signal.END
        return qs.merge_cohorts(index, parts)

    async def return_cohort(self, result: CohortResult, owners: list[str]) -> int:
        """The cohort just taken goes back to the shards it came from (the learner lost payloads of `owners`)."""
        parts = qs.split_cohort(result, len(self.shards))
        return sum(await asyncio.gather(*[s.return_cohort.remote(p, owners) for s, p in zip(self.shards, parts)]))

    async def set_version(self, version: int) -> None:
        await self._all("set_version", version)

    async def release_sampler(self, sampler_id: str, retire: bool = False) -> int:
        return sum(await self._all("release_sampler", sampler_id, retire))

    async def stop(self) -> dict:
        return qs.merge_accounting(await self._all("stop"))

    async def accounting(self) -> dict:
        return qs.merge_accounting(await self._all("accounting"))

    async def stats(self) -> dict:
        return qs.merge_stats(await self._all("stats"))

    async def resources(self) -> dict:
        return qs.merge_resources(await self._all("resources"))

    async def state_dict(self) -> dict:
        return qs.sharded_state(await self._all("state_dict"))

    async def load_state_dict(self, state: dict) -> None:
        states = qs.shard_states(state, len(self.shards))
        await asyncio.gather(*[s.load_state_dict.remote(st) for s, st in zip(self.shards, states)])
        self.end = None

    async def estimator_state(self) -> dict:
        return qs.merge_estimator_states(await self._all("estimator_state"))

    async def num_shards(self) -> int:
        return len(self.shards)


def check_shard_sizes(prompts: Any, batch_prompts: int, shards: int) -> None:
    """Every shard must hold at least its share of a cohort (a cohort never holds a prompt twice)."""
    counts = Counter(qs.shard_of(pid, shards) for pid in as_source(prompts).ids())
    for k, share in enumerate(qs.batch_shares(batch_prompts, shards)):
        if counts[k] < share:
            raise ConfigError(
                f"config: trainer.queue_shards = {shards}: shard {k} holds {counts[k]} of the training set's "
                f"prompts, fewer than its {share} prompts of every step (trainer.batch_prompts = {batch_prompts}); "
                "use fewer shards")


def build_queue(prompts: Union[Any, Sequence], cfg: dict, estimator_state: Optional[dict] = None,
                shards: Optional[int] = None, options: Optional[dict] = None) -> tuple[Any, list]:
    """The run's prompt queue: (the handle the driver calls, the handles samplers lease from).

    `cfg` is `to_dict(config)`; `shards` defaults to its trainer.queue_shards. With one shard this is
    the single PromptQueue, returned as both (PromptQueue, [PromptQueue]); with K > 1, K PromptQueue
    shards and a QueueCoordinator over them: (coordinator, [shard 0, ..., shard K-1]); sampler i
    belongs to shard i % K. `options` go to `.options(...)` of every actor made (e.g. num_cpus=0,
    a runtime_env, a scheduling strategy)."""
    c = from_dict(cfg)
    k = c.trainer.queue_shards if shards is None else shards
    opts = dict(options or {})
    if k == 1:
        q = PromptQueue.options(**opts).remote(prompts, cfg, estimator_state)
        return q, [q]
    if k < 1:
        raise ConfigError(f"config: trainer.queue_shards must be > 0, got {k}")
    check_shard_sizes(prompts, c.trainer.batch_prompts, k)
    shares = qs.batch_shares(c.trainer.batch_prompts, k)
    handles = [PromptQueue.options(**opts).remote(qs.shard_prompts(prompts, i, k), cfg,
                                                  qs.shard_estimator_state(estimator_state, i, k), shares[i])
               for i in range(k)]
    return QueueCoordinator.options(**opts).remote(handles), handles
