"""Sampler actor: a vLLM engine kept full by a loop thread, fed by the PromptQueue.

The loop thread owns the engine; everything that touches it (weight updates, evaluation, joining
the WeightBus) is a command the loop runs between engine steps, so the engine never generates from
a half-loaded model and a learner never waits longer than one engine step. Work enters as capacity
frees (continuous batching, no round barrier across prompts); each finished item is scored and
reported with its token ids, behaviour log-probs and the policy version it started under.
Leasing is pipelined: the next lease call is in flight while the engine steps.
"""

from __future__ import annotations

import os
import queue as queue_mod
import threading
import time
import traceback
from concurrent.futures import Future
from typing import Any, Callable, Optional

import ray

from ada_ray.config import from_dict


@ray.remote(max_concurrency=8)
class Sampler:
    def __init__(self, sampler_id: str, cfg: dict, model_path: str, prompt_queue, use_gpu: bool,
                 version: int = 0, env: Optional[dict] = None):
        for k, v in (env or {}).items():
            os.environ[k] = v
        from ada_ray.engines.vllm_engine import VLLMEngine
        from ada_ray.rewards import SafeScorer

        self.id = sampler_id
        self.cfg = from_dict(cfg)
        self.queue = prompt_queue
        self.engine = VLLMEngine(model_path, self.cfg.sampler, "auto" if use_gpu else "float32", gpu=use_gpu)
        self.scorer = SafeScorer(self.cfg.data.reward, self.cfg.data.reward_timeout_s, self.cfg.sampler.reward_workers)
        self.version = version
        # work kept in the engine: twice what it runs at once, so finished sequences are replaced
        # from its own waiting queue, without waiting for a lease round trip
        self.capacity = 2 * self.cfg.sampler.max_num_seqs
        self.commands: "queue_mod.Queue[tuple[Callable[[], Any], Future]]" = queue_mod.Queue()
        self.sampling = False
        self.stopping = False
        self.weights_ok = True  # False after a failed update: no generation until the next one
        self.error: Optional[str] = None
        self.items: dict[str, tuple[Any, int]] = {}  # request id -> (work item, start version)
        self.inflight_samples = 0
        self.evals: dict[str, tuple[str, int]] = {}  # request id -> (eval batch id, prompt index)
        self.eval_batches: dict[str, dict] = {}
        self.lease_ref = None
        self.report_refs: list = []
        self._pending: list = []
        self.stats_ = {"busy_s": 0.0, "idle_s": 0.0, "update_s": 0.0, "steps": 0, "samples": 0, "tokens": 0,
                       "items": 0, "reward_errors": 0, "updates": 0}
        self.thread = threading.Thread(target=self._loop, name=f"sampler-{sampler_id}", daemon=True)
        self.thread.start()

    # -- commands run on the loop thread -------------------------------------------------------

    def _call(self, fn: Callable[[], Any], timeout: Optional[float] = None):
        if self.error:
            raise RuntimeError(f"sampler {self.id} loop died: {self.error}")
        fut: Future = Future()
        self.commands.put((fn, fut))
        return fut.result(timeout=timeout)

    def ready(self) -> str:
        if self.error:
            raise RuntimeError(f"sampler {self.id} loop died: {self.error}")
        return self.id

    def pid(self) -> int:
        return os.getpid()

    def join_bus(self, host: str, port: int, base_rank: int, world_size: int, backend: str, timeout_s: float):
        return self._call(lambda: self.engine.join_bus(host, port, base_rank, world_size, backend, timeout_s))

    def leave_bus(self) -> None:
        self._call(self.engine.leave_bus)

    def update_weights(self, meta: dict) -> int:
        def apply():
            t0 = time.perf_counter()
            try:
                self.engine.receive_weights(meta)
            except Exception:
                # the model may be half loaded: drop what is in flight (the driver hands the leased
                # work out again) and generate nothing until a complete update arrives
                self.weights_ok = False
                self.engine.abort_all()
                self.items.clear()
                self.inflight_samples = 0
                raise
            self.weights_ok = True
            self.version = int(meta["version"])
            self.stats_["update_s"] += time.perf_counter() - t0
            self.stats_["updates"] += 1
            return self.version

        return self._call(apply)

    def start_sampling(self) -> None:
        self.sampling = True

    def pause_sampling(self) -> None:
        self.sampling = False

    def evaluate(self, prompts: list[list[int]], answers: list[str], k: int, temperature: float, seed: int,
                 max_tokens: Optional[int] = None, offset: int = 0) -> dict:
        """k samples per prompt (seed of prompt i: eval_seed(seed, offset + i), as ada_ray.evaluate)
        at the current weights; returns correct counts and reward errors."""
        from ada_ray.evaluate import eval_seed

        batch_id = f"eval{time.monotonic_ns()}"
        done: Future = Future()

        def submit():
            self.eval_batches[batch_id] = {"answers": answers, "correct": [0] * len(prompts), "left": len(prompts),
                                           "errors": 0, "future": done, "version": self.version}
            for i, p in enumerate(prompts):
                rid = f"{batch_id}-{i}"
                self.evals[rid] = (batch_id, i)
                self.engine.add(rid, p, k, eval_seed(seed, offset + i), temperature, max_tokens)
            if not prompts:
                done.set_result({"correct": [], "errors": 0, "version": self.version})

        self._call(submit)
        return done.result()

    def stop(self) -> dict:
        self.stopping = True
        self.thread.join(timeout=60)
        self.scorer.close()
        return self.stats()

    def stats(self) -> dict:
        return dict(self.stats_, version=self.version, inflight_samples=self.inflight_samples,
                    error=self.error)

    def weight_checksum(self) -> float:
        return self._call(self.engine.weight_checksum)

    def logprobs_of(self, prompt: list[int], completion: list[int]) -> list[float]:
        """Log-probs the engine assigns to a fixed completion (tests: weight sync is real)."""
        return self._call(lambda: self.engine.score_completion(prompt, completion))

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self.stopping:
                self._run_commands()
                if self.sampling and self.weights_ok:
                    self._lease()
                self._flush_reports()
                if self.weights_ok and self.engine.has_unfinished():
                    t0 = time.perf_counter()
                    finished = self.engine.step()
                    self.stats_["busy_s"] += time.perf_counter() - t0
                    self.stats_["steps"] += 1
                    for f in finished:
                        self._finished(f)
                else:
                    t0 = time.perf_counter()
                    self._idle_wait()
                    if self.sampling:
                        self.stats_["idle_s"] += time.perf_counter() - t0
            self.engine.abort_all()
            self._flush_reports(final=True)
        except Exception:  # noqa: BLE001 - surface it to every caller
            self.error = traceback.format_exc(limit=8)
            while not self.commands.empty():
                _, fut = self.commands.get_nowait()
                fut.set_exception(RuntimeError(f"sampler {self.id} loop died: {self.error}"))

    def _run_one(self, timeout: Optional[float]) -> bool:
        """Run one queued command (waiting up to `timeout`; None: do not wait). False if none."""
        try:
            fn, fut = self.commands.get(timeout=timeout) if timeout else self.commands.get_nowait()
        except queue_mod.Empty:
            return False
        try:
            fut.set_result(fn())
        except Exception as exc:  # noqa: BLE001
            fut.set_exception(exc)
        return True

    def _run_commands(self) -> None:
        while self._run_one(None):
            pass

    def _idle_wait(self) -> None:
        """Nothing to generate: wait for a command or for the pending lease."""
        if self.lease_ref is not None:
            ready, _ = ray.wait([self.lease_ref], timeout=0.05)
            if ready:
                return
        self._run_one(0.02 if self.sampling else 0.1)

    def _lease(self) -> None:
        if self.lease_ref is not None:
            ready, _ = ray.wait([self.lease_ref], timeout=0)
            if not ready:
                return
            items = ray.get(self.lease_ref)
            self.lease_ref = None
            if items == "stop":
                self.sampling = False
                return
            for it in items:
                rid = f"w{it.item_id}"
                self.items[rid] = (it, self.version)
                self.inflight_samples += it.num_samples
                self.engine.add(rid, it.token_ids, it.num_samples, it.seed)
        room = self.capacity - self.inflight_samples
        if room > 0 and self.lease_ref is None:
            wait_s = 0.0 if self.engine.has_unfinished() else 0.5
            self.lease_ref = self.queue.lease.remote(self.id, 1_000_000, room, wait_s)

    def _finished(self, f) -> None:
        if f.request_id in self.evals:
            self._eval_finished(f)
            return
        entry = self.items.pop(f.request_id, None)
        if entry is None:
            return
        item, start_version = entry
        self.inflight_samples -= item.num_samples
        from ada_ray.algo.types import Sample

        scores = self.scorer.score([c.text for c in f.completions], [item.answer] * len(f.completions))
        samples = []
        for c, (score, failed) in zip(f.completions, scores):
            samples.append(Sample(item.prompt_id, c.token_ids, c.logprobs, score, start_version, item.round,
                                  c.text, c.finish_reason, failed))
            self.stats_["tokens"] += len(c.token_ids)
            self.stats_["reward_errors"] += int(failed)
        self.stats_["samples"] += len(samples)
        self.stats_["items"] += 1
        self._pending.append((item.item_id, samples))

    def _flush_reports(self, final: bool = False) -> None:
        if self._pending:
            self.report_refs.append(self.queue.report_many.remote(self.id, self._pending))
            self._pending = []
        if self.report_refs:
            ready, self.report_refs = ray.wait(self.report_refs, num_returns=len(self.report_refs),
                                               timeout=10.0 if final else 0)
            for r in ready:
                ray.get(r)  # surfaces scheduler errors in this sampler

    def _eval_finished(self, f) -> None:
        batch_id, i = self.evals.pop(f.request_id)
        b = self.eval_batches[batch_id]
        scores = self.scorer.score([c.text for c in f.completions], [b["answers"][i]] * len(f.completions))
        b["correct"][i] = sum(1 for s, _ in scores if s > 0.5)
        b["errors"] += sum(1 for _, failed in scores if failed)
        b["left"] -= 1
        if b["left"] == 0:
            del self.eval_batches[batch_id]
            b["future"].set_result({"correct": b["correct"], "errors": b["errors"], "version": b["version"]})
