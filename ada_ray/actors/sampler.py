"""Sampler actor: a vLLM engine kept full by a loop thread, fed by the PromptQueue.

A thin Ray shell around `SamplerLoop` (no Ray there: sampler_loop.py steps the engine and runs
commands between steps, sampler_leases.py leases on a second thread, sampler_reports.py scores and
reports on a third): it builds the engine and the scorer, reaches the queue through `RayQueueLink`,
runs the loop on a thread, and turns each remote call into a loop command, waited on with a
deadline (weight_sync.timeout_s for the bus and updates, EVAL_TIMEOUT_S for an evaluation). It owns its
payload batches (actors/ray_payloads.py): readers ask it for their references (`payload_refs`, in a
concurrency group of its own, so an update or evaluation in progress never holds a learner's fetch up).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Optional

import ray

from ada_ray.actors.queue_relay import asks_ride_reports
from ada_ray.actors.ray_payloads import RayPayloadStore
from ada_ray.actors.sampler_loop import SamplerLoop
from ada_ray.actors.sampler_reports import report_interval
from ada_ray.config import from_dict

EVAL_TIMEOUT_S = 3600.0  # one evaluate call (all its prompts) on the sampler's engine
STOP_JOIN_S = 60.0  # the loop thread's exit: the last reports are sent within SamplerLoop.stop_flush_s


class RayQueueLink:
    """`QueueLink` over the PromptQueue actor handle: pending handles are ObjectRefs."""

    def __init__(self, handle):
        self.handle = handle

    def lease(self, sampler_id: str, max_items: int, max_samples: int, wait_s: float):
        return self.handle.lease.remote(sampler_id, max_items, max_samples, wait_s)

    def report_many(self, sampler_id: str, reports: list, lease: Optional[tuple] = None):
        return self.handle.report_many.remote(sampler_id, reports, lease)

    def wait(self, pending: list, timeout: float) -> tuple[list, list]:
        return ray.wait(pending, num_returns=len(pending), timeout=timeout)

    def get(self, pending):
        return ray.get(pending)


@ray.remote(max_concurrency=8, concurrency_groups={"payloads": 2})
class Sampler:
    def __init__(self, sampler_id: str, cfg: dict, model_path: str, prompt_queue, use_gpu: bool,
                 version: int = 0, env: Optional[dict] = None, payload_owner: Optional[str] = None):
        """`payload_owner`: the name this actor was created under in ray_payloads.OWNERS_NAMESPACE
        (sampler.payload_transport = object_store: readers find its batches by it)."""
        for k, v in (env or {}).items():
            os.environ[k] = v
        from ada_ray.engines.vllm_engine import VLLMEngine
        from ada_ray.rewards import SafeScorer

        self.id = sampler_id
        self.cfg = from_dict(cfg)
        self.engine = VLLMEngine(model_path, self.cfg.sampler, "auto" if use_gpu else "float32", gpu=use_gpu)
        self.scorer = SafeScorer(self.cfg.data.reward, self.cfg.data.reward_timeout_s, self.cfg.sampler.reward_workers)
        # work kept in the engine: twice what it runs at once, so finished sequences are replaced
        # from its own waiting queue, without waiting for a lease round trip
        self.loop = SamplerLoop(sampler_id, self.engine, RayQueueLink(prompt_queue), self.scorer,
                                capacity=2 * self.cfg.sampler.max_num_seqs, version=version,
                                payloads=RayPayloadStore(payload_owner)
                                if self.cfg.sampler.payload_transport == "object_store" else None,
                                max_staleness=self.cfg.trainer.max_staleness,
                                asks_ride_reports=asks_ride_reports(self.cfg.sampler),
                                report_interval_s=report_interval(self.cfg))
        self.thread = threading.Thread(target=self.loop.run, name=f"sampler-{sampler_id}", daemon=True)
        self.thread.start()

    def ready(self) -> str:
        self.loop.check_alive()
        return self.id

    def pid(self) -> int:
        return os.getpid()

    @ray.method(concurrency_group="payloads")
    def payload_refs(self, keys: list[str]) -> list:
        """References to this sampler's payload batches `keys` (None for one it no longer holds). Only asked
        under sampler.payload_transport = object_store: inline samples name no batch."""
        return self.loop.payloads.refs(keys)

    def _wait(self, fut: Future, timeout_s: float, what: str) -> Any:
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout:
            raise TimeoutError(f"sampler {self.id}: {what} not done within {timeout_s:g}s") from None

    def join_bus(self, host: str, port: int, base_rank: int, world_size: int, backend: str, timeout_s: float):
        return self._wait(self.loop.submit(lambda: self.engine.join_bus(host, port, base_rank, world_size, backend,
                                                                        timeout_s)), 2 * timeout_s, "join_bus")

    def leave_bus(self) -> None:
        self._wait(self.loop.submit(self.engine.leave_bus), self.cfg.weight_sync.timeout_s, "leave_bus")

    def update_weights(self, meta: dict) -> int:
        return self._wait(self.loop.update_weights(meta), self.cfg.weight_sync.timeout_s, "update_weights")

    def start_sampling(self) -> None:
        self.loop.start()

    def pause_sampling(self) -> None:
        self.loop.pause()

    def evaluate(self, prompts: list[list[int]], answers: list[str], k: int, temperature: float, seed: int,
                 max_tokens: Optional[int] = None, offset: int = 0) -> dict:
        """k samples per prompt (seed of prompt i: eval_seed(seed, offset + i), as ada_ray.evaluate)
        at the current weights; returns correct counts and reward errors."""
        from ada_ray.evaluate import eval_seed

        seeds = [eval_seed(seed, offset + i) for i in range(len(prompts))]
        return self._wait(self.loop.evaluate(prompts, answers, k, temperature, seeds, max_tokens), EVAL_TIMEOUT_S,
                          "evaluate")

    def stop(self) -> dict:
        self.loop.stop()
        self.thread.join(timeout=STOP_JOIN_S)
        self.scorer.close()
        return self.stats()

    def stats(self) -> dict:
        return self.loop.stats()

    def weight_checksum(self) -> float:
        return self._wait(self.loop.submit(self.engine.weight_checksum), self.cfg.weight_sync.timeout_s,
                          "weight_checksum")

    def logprobs_of(self, prompt: list[int], completion: list[int]) -> list[float]:
        """Log-probs the engine assigns to a fixed completion (tests: weight sync is real)."""
        return self._wait(self.loop.submit(lambda: self.engine.score_completion(prompt, completion)),
                          self.cfg.weight_sync.timeout_s, "logprobs_of")
