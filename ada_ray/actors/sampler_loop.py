"""The sampler's loop without Ray: keep an Engine full with leased work, score what finishes,
report it to the queue. The Sampler actor (sampler.py) is a thin shell that runs `SamplerLoop.run`
on a thread; tests drive `tick` with a fake engine and a fake queue.

The loop thread owns the engine; everything that touches it (weight updates, evaluation, joining
the WeightBus) is a command the loop runs between engine steps, so the engine never generates from
a half-loaded model and a learner never waits longer than one engine step. Work enters as capacity
frees (continuous batching, no round barrier across prompts); each finished item is scored and
reported with its token ids, behaviour log-probs and the policy version it started under (in this
sampler: an update mid-generation does not relabel it; the queue's admission control bounds its
staleness). Leasing is pipelined: the next lease call is in flight while the engine steps.
"""

from __future__ import annotations

import queue as queue_mod
import time
import traceback
from concurrent.futures import Future
from typing import Any, Callable, Optional, Protocol, Sequence

from ada_ray.algo.types import Sample, Signal, WorkItem
from ada_ray.engines.protocol import Engine, Finished


class QueueLink(Protocol):
    """How the loop reaches the PromptQueue: calls return pending handles, never block."""

    def lease(self, sampler_id: str, max_items: int, max_samples: int, wait_s: float) -> Any:
        """Pending list[WorkItem] (possibly empty) or Signal.STOP."""

    def report_many(self, sampler_id: str, reports: list[tuple[int, list[Sample]]]) -> Any:
        """Pending list[bool]; getting it raises what the scheduler raised."""

    def wait(self, pending: list, timeout: float) -> tuple[list, list]:
        """(ready, not ready) once all are ready or `timeout` seconds have passed (0: do not wait)."""

    def get(self, pending: Any) -> Any: ...


class Scorer(Protocol):
    """rewards.SafeScorer: (score, failed) per completion; never raises for a bad reward function."""

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> list[tuple[float, bool]]: ...


class LoopDied(RuntimeError):
    pass


class SamplerLoop:
    # idle waits (seconds): for a pending lease; for a command while sampling; while paused
    lease_poll_s = 0.05
    idle_sampling_s = 0.02
    idle_paused_s = 0.1
    lease_wait_s = 0.5  # how long the queue may hold a lease call when the engine is empty

    def __init__(self, sampler_id: str, engine: Engine, queue: QueueLink, scorer: Scorer, capacity: int,
                 version: int = 0):
        self.id = sampler_id
        self.engine = engine
        self.queue = queue
        self.scorer = scorer
        self.version = version
        self.capacity = capacity  # samples kept in the engine (leased, not yet finished)
        self.commands: "queue_mod.Queue[tuple[Callable[[], Any], Future]]" = queue_mod.Queue()
        self.sampling = False
        self.stopping = False
        self.weights_ok = True  # False after a failed update: no generation until the next one
        self.error: Optional[str] = None
        self.items: dict[str, tuple[WorkItem, int]] = {}  # request id -> (work item, start version)
        self.inflight_samples = 0
        self.evals: dict[str, tuple[str, int]] = {}  # request id -> (eval batch id, prompt index)
        self.eval_batches: dict[str, dict] = {}
        self.lease_ref: Any = None
        self.report_refs: list = []
        self._pending: list[tuple[int, list[Sample]]] = []
        self.stats_ = {"busy_s": 0.0, "idle_s": 0.0, "update_s": 0.0, "steps": 0, "samples": 0, "tokens": 0,
                       "items": 0, "reward_errors": 0, "updates": 0}

    # -- commands (any thread) ------------------------------------------------------------------

    def check_alive(self) -> None:
        if self.error:
            raise LoopDied(f"sampler {self.id} loop died: {self.error}")

    def submit(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the loop thread between engine steps; its result or exception in the future."""
        self.check_alive()
        fut: Future = Future()
        self.commands.put((fn, fut))
        return fut

    def call(self, fn: Callable[[], Any], timeout: Optional[float] = None):
        return self.submit(fn).result(timeout=timeout)

    def update_weights(self, meta: dict) -> Future:
        """Load one update between engine steps; the future holds the new version."""
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

        return self.submit(apply)

    def evaluate(self, prompts: list[list[int]], answers: list[str], k: int, temperature: float,
                 seeds: list[int], max_tokens: Optional[int] = None) -> Future:
        """k samples of each prompt (prompt i with seeds[i]) at the current weights; the future
        holds {"correct": count per prompt, "errors": reward errors, "version": the weights'}."""
        batch_id = f"eval{time.monotonic_ns()}"
        done: Future = Future()

        def start():
            self.eval_batches[batch_id] = {"answers": answers, "correct": [0] * len(prompts), "left": len(prompts),
                                           "errors": 0, "future": done, "version": self.version}
            for i, p in enumerate(prompts):
                rid = f"{batch_id}-{i}"
                self.evals[rid] = (batch_id, i)
                self.engine.add(rid, p, k, seeds[i], temperature, max_tokens)
            if not prompts:
                del self.eval_batches[batch_id]
                done.set_result({"correct": [], "errors": 0, "version": self.version})

        def failed_to_start(cmd: Future) -> None:
            if cmd.exception() is not None and not done.done():
                done.set_exception(cmd.exception())

        self.submit(start).add_done_callback(failed_to_start)
        return done

    def stats(self) -> dict:
        return dict(self.stats_, version=self.version, inflight_samples=self.inflight_samples, error=self.error)

    # -- the loop (its own thread) ----------------------------------------------------------------

    def run(self) -> None:
        """tick until stopped, then drop what is in the engine and send the last reports."""
        try:
            while not self.stopping:
                self.tick()
            self.engine.abort_all()
            self._flush_reports(final=True)
        except Exception:  # noqa: BLE001 - surface it to every caller
            self.error = traceback.format_exc(limit=8)
            died = f"sampler {self.id} loop died: {self.error}"
            while not self.commands.empty():
                _, fut = self.commands.get_nowait()
                fut.set_exception(LoopDied(died))
            for b in self.eval_batches.values():  # evaluations in flight would wait forever
                b["future"].set_exception(LoopDied(died))

    def tick(self) -> None:
        """One pass: commands, leasing, reports, then one engine step (or a short idle wait)."""
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
            ready, _ = self.queue.wait([self.lease_ref], self.lease_poll_s)
            if ready:
                return
        self._run_one(self.idle_sampling_s if self.sampling else self.idle_paused_s)

    def _lease(self) -> None:
        if self.lease_ref is not None:
            ready, _ = self.queue.wait([self.lease_ref], 0)
            if not ready:
                return
            items = self.queue.get(self.lease_ref)
            self.lease_ref = None
            if items == Signal.STOP:
                self.sampling = False
                return
            for it in items:
                rid = f"w{it.item_id}"
                self.items[rid] = (it, self.version)
                self.inflight_samples += it.num_samples
                self.engine.add(rid, it.token_ids, it.num_samples, it.seed)
        room = self.capacity - self.inflight_samples
        if room > 0 and self.lease_ref is None:
            wait_s = 0.0 if self.engine.has_unfinished() else self.lease_wait_s
            self.lease_ref = self.queue.lease(self.id, 1_000_000, room, wait_s)

    def _finished(self, f: Finished) -> None:
        if f.request_id in self.evals:
            self._eval_finished(f)
            return
        entry = self.items.pop(f.request_id, None)
        if entry is None:
            return  # dropped by a failed weight update
        item, start_version = entry
        self.inflight_samples -= item.num_samples
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
            self.report_refs.append(self.queue.report_many(self.id, self._pending))
            self._pending = []
        if self.report_refs:
            ready, self.report_refs = self.queue.wait(self.report_refs, 10.0 if final else 0)
            for r in ready:
                self.queue.get(r)  # surfaces scheduler errors in this sampler

    def _eval_finished(self, f: Finished) -> None:
        batch_id, i = self.evals.pop(f.request_id)
        b = self.eval_batches[batch_id]
        scores = self.scorer.score([c.text for c in f.completions], [b["answers"][i]] * len(f.completions))
        b["correct"][i] = sum(1 for s, _ in scores if s > 0.5)
        b["errors"] += sum(1 for _, failed in scores if failed)
        b["left"] -= 1
        if b["left"] == 0:
            del self.eval_batches[batch_id]
            b["future"].set_result({"correct": b["correct"], "errors": b["errors"], "version": b["version"]})
