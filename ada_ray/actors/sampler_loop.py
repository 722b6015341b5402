"""The sampler's loop without Ray: keep an Engine full with leased work and hand what finishes to
the report pipeline (sampler_reports.py: scoring and reporting on its own thread, so the engine
never waits for a verifier or a report call). The Sampler actor (sampler.py) is a thin shell that
runs `SamplerLoop.run` on a thread; tests drive `tick` with a fake engine and a fake queue.

The loop thread owns the engine; everything that touches it (weight updates, evaluation, joining
the WeightBus) is a command the loop runs between engine steps, so the engine never generates from
a half-loaded model and a learner never waits longer than one engine step. Work enters as capacity
frees (continuous batching, no round barrier across prompts); each finished item is reported with
its token ids, behaviour log-probs, reward and the policy version it started under (in this
sampler: an update mid-generation does not relabel it; the queue's admission control bounds its
staleness). Leasing runs on a third thread (sampler_leases.py): the next lease call is out while
the engine steps, asking for the room left below `capacity`, unless more than `capacity` samples
wait to be scored (then it waits for the scorer rather than pile up leased work); the loop only
adds what has come back to the engine. A stop sends every finished item's report.
"""

from __future__ import annotations

import queue as queue_mod
import time
import traceback
from concurrent.futures import Future
from typing import Any, Callable, Optional

from ada_ray.actors.sampler_leases import LeaseFeeder
from ada_ray.actors.sampler_links import QueueLink, Scorer
from ada_ray.actors.sampler_reports import Job, ReportPipeline, settle
from ada_ray.algo.payloads import PayloadStore
from ada_ray.algo.types import WorkItem
from ada_ray.engines.protocol import Engine, Finished


class LoopDied(RuntimeError):
    pass


class SamplerLoop:
    # idle waits for a command (seconds; leased work and start() wake the loop at once)
    idle_sampling_s = 0.02
    idle_paused_s = 0.1
    stop_flush_s = 10.0  # how long a stop waits for the last reports to be scored, sent and answered

    def __init__(self, sampler_id: str, engine: Engine, queue: QueueLink, scorer: Scorer, capacity: int,
                 version: int = 0, payloads: Optional[PayloadStore] = None, max_staleness: int = 0,
                 asks_ride_reports: bool = True, report_interval_s: float = 0.0):
        """`max_staleness`: the run's (trainer.max_staleness): once the weights are that many versions (and
        one more) past a payload batch's samples, no cohort can train them and the batch is dropped.
        `asks_ride_reports` (sampler.leases_ride_reports): the feeder's lease asks go out with the report
        calls when one is coming (sampler_leases.py). `report_interval_s` (sampler.report_interval_s): at
        most one report call that often (sampler_reports.py)."""
        self.id = sampler_id
        self.engine = engine
        self.version = version
        self.capacity = capacity  # leased samples kept (in the engine or on their way to it)
        self.commands: "queue_mod.Queue[tuple[Callable[[], Any], Future]]" = queue_mod.Queue()
        self.sampling = False
        self.stopping = False
        self.weights_ok = True  # False after a failed update: no generation until the next one
        self.error: Optional[str] = None
        self.items: dict[str, tuple[WorkItem, int]] = {}  # request id -> (work item, start version)
        self.inflight_samples = 0
        self.evals: dict[str, tuple[str, int]] = {}  # request id -> (eval batch id, prompt index)
        self.eval_batches: dict[str, dict] = {}
        self.payloads = payloads
        self.max_staleness = max_staleness
        self.reports = ReportPipeline(sampler_id, queue, scorer, payloads, report_interval_s)
        self.feeder = LeaseFeeder(sampler_id, queue, capacity, self._scoring_behind, self._wake,
                                  self._report_coming if asks_ride_reports else None)
        if asks_ride_reports:
            self.reports.carry_asks(self.feeder)
        # busy_s: engine steps; lease_s: adding leased work to the engine; cpu_s: the loop thread's
        # CPU time (what other processes on the machine take does not count there)
        self.stats_ = {"busy_s": 0.0, "idle_s": 0.0, "update_s": 0.0, "lease_s": 0.0, "cpu_s": 0.0, "steps": 0,
                       "updates": 0, "payloads_expired": 0}

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

    def start(self) -> None:
        """Lease and generate; wakes a paused loop at once (it would notice within idle_paused_s)."""
        self.sampling = True
        self._wake()

    def _wake(self) -> None:
        self.commands.put((lambda: None, Future()))

    def pause(self) -> None:
        """Lease nothing more; what is in the engine finishes and is reported."""
        self.sampling = False

    def stop(self) -> None:
        """End `run` after the current pass: drop the engine's work, send the last reports."""
        self.stopping = True
        self._wake()

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
                self.feeder.finished(self.inflight_samples)
                self.inflight_samples = 0
                raise
            self.weights_ok = True
            self.version = int(meta["version"])
            if self.payloads is not None:
                self.stats_["payloads_expired"] += self.payloads.expire(self.version, self.max_staleness)
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
            if cmd.exception() is not None:
                settle(done, exc=cmd.exception())

        self.submit(start).add_done_callback(failed_to_start)
        return done

    def stats(self) -> dict:
        """Running totals: the loop's (engine steps, idle, updates, adding leased work), the feeder's
        (lease calls, items leased, empty answers) and the report pipeline's (items, samples and
        tokens reported, reward errors, seconds scoring and sending)."""
        return dict(self.stats_, **self.reports.stats, **self.feeder.stats, version=self.version,
                    inflight_samples=self.inflight_samples, unscored_samples=self.reports.backlog_samples,
                    error=self.error)

    # -- the loop (its own thread) ----------------------------------------------------------------

    def run(self) -> None:
        """tick until stopped, then drop what is in the engine and send the last reports."""
        try:
            while not self.stopping:
                self.tick()
            self.feeder.close()
            self.engine.abort_all()
            self.reports.close(self.stop_flush_s)
        except Exception:  # noqa: BLE001 - surface it to every caller
            self.error = traceback.format_exc(limit=8)
            self.feeder.close()
            self.reports.abandon()
            died = f"sampler {self.id} loop died: {self.error}"
            while not self.commands.empty():
                _, fut = self.commands.get_nowait()
                settle(fut, exc=LoopDied(died))
            for b in list(self.eval_batches.values()):  # evaluations in flight would wait forever
                settle(b["future"], exc=LoopDied(died))

    def tick(self) -> None:
        """One pass: commands, the work leased since the last pass into the engine, then one engine
        step (or a short idle wait); what finishes goes to the report pipeline. A failure of the
        feeder or the pipeline (a lease unanswered, a report the queue refused) ends the loop."""
        cpu0 = time.thread_time()
        self._run_commands()
        self.reports.raise_if_failed()
        self.feeder.raise_if_failed()
        if self._leasing():
            t0 = time.perf_counter()
            self._add_leased()
            self.stats_["lease_s"] += time.perf_counter() - t0
        self.feeder.want(self._leasing())
        if self.weights_ok and self.engine.has_unfinished():
            t0 = time.perf_counter()
            finished = self.engine.step()
            self.stats_["busy_s"] += time.perf_counter() - t0
            self.stats_["steps"] += 1
            if finished:
                self._hand_over(finished)
        else:
            t0 = time.perf_counter()
            self._idle_wait()
            if self.sampling:
                self.stats_["idle_s"] += time.perf_counter() - t0
        self.stats_["cpu_s"] += time.thread_time() - cpu0

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

    def _leasing(self) -> bool:
        return self.sampling and self.weights_ok

    def _idle_wait(self) -> None:
        """Nothing to generate: wait for a command (the feeder's arrivals and start() are commands)."""
        self._run_one(self.idle_sampling_s if self.sampling else self.idle_paused_s)

    def _scoring_behind(self) -> bool:
        return self.reports.backlog_samples > self.capacity

    def _report_coming(self) -> bool:
        """Finished work handed to the report pipeline and not yet sent: a lease ask can ride it."""
        return self.reports.backlog_samples > 0

    def _add_leased(self) -> None:
        items, stop = self.feeder.take()
        for it in items:
            rid = f"w{it.item_id}"
            self.items[rid] = (it, self.version)
            self.inflight_samples += it.num_samples
            self.engine.add(rid, it.token_ids, it.num_samples, it.seed)
        if stop:
            self.sampling = False

    def _hand_over(self, finished: list[Finished]) -> None:
        """A step's finished requests to the report pipeline, and their room back to the feeder: one
        call each per step (each wakes a thread)."""
        jobs, done = [], 0
        for f in finished:
            if f.request_id in self.evals:
                jobs.append(self._eval_job(f))
                continue
            entry = self.items.pop(f.request_id, None)
            if entry is None:
                continue  # dropped by a failed weight update
            item, start_version = entry
            done += item.num_samples
            jobs.append(Job.work(item, start_version, f.completions))
        if jobs:  # first: the feeder, told of the room next, sees a report coming that its ask can ride
            self.reports.put(jobs)
        if done:
            self.inflight_samples -= done
            self.feeder.finished(done)

    def _eval_job(self, f: Finished) -> Job:
        batch_id, i = self.evals.pop(f.request_id)
        b = self.eval_batches[batch_id]

        def scored(scores: list[tuple[float, bool]]) -> None:  # on the report pipeline's thread
            b["correct"][i] = sum(1 for s, _ in scores if s > 0.5)
            b["errors"] += sum(1 for _, failed in scores if failed)
            b["left"] -= 1
            if b["left"] == 0:
                self.eval_batches.pop(batch_id, None)
                settle(b["future"], {"correct": b["correct"], "errors": b["errors"], "version": b["version"]})

        return Job.evaluation(f.completions, b["answers"][i], scored)
