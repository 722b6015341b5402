"""The driver loop: `ada-ray train`. Reads like the algorithm it runs.

    set up: check every input, open the run dir and MLflow (driver/run_setup.py); connect to Ray
    build the runtime (queue, samplers, learners, weight bus); resume if asked
    for step in steps:
        cohort  <- wait for the B groups of this step (admission control bounds their staleness)
        metrics <- learners train on them (one DeepSpeed step per mini-batch)
        broadcast the new weights to every sampler; the queue learns the new version
        log; evaluate and checkpoint when due
    a failure restarts.what_died names: rebuild from the last complete checkpoint and go on
    shut everything down; check the work accounting; plots and the final policy to MLflow;
    the run's files to its storage location (a folder, or a URI: driver/run_storage.py)

Async mode (default) lets samplers run ahead up to trainer.max_staleness versions; sync mode
samples each step's cohort with the current weights behind a round barrier, as the official
implementation does. The loop talks to the system only through the `DriverRuntime` verbs
(driver/protocol.py), so tests/driver/test_train_loop.py drives it with a fake.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from ada_ray import storage
from ada_ray.algo.payloads import CohortPayloadsLost
from ada_ray.algo.types import Signal
from ada_ray.config import AdaRayConfig
from ada_ray.driver import checkpoint as ckpt
from ada_ray.driver.protocol import DriverRuntime
from ada_ray.driver.restarts import what_died
from ada_ray.driver.run_files import RunFiles
from ada_ray.driver.run_storage import RunStorage
from ada_ray.driver.run_setup import RunSetup, set_up
from ada_ray.driver.step_metrics import StepTimer, SystemMeter, cohort_metrics
from ada_ray.errors import AdaRayError


class TrainingError(AdaRayError, RuntimeError):
    """The run cannot go on: no cohort in time, a streak of non-finite losses."""


def train(cfg: AdaRayConfig, log=print, config_name: Optional[str] = None) -> int:
    """Set up, train (healing what restarts.what_died names), finish. The teardown always runs, every
    part of it, and never hides the error that ended the run."""
    from ada_ray.driver import cluster as cl
    from ada_ray.driver.runtime import Runtime

    cl.refuse_unhostable(cfg)  # a local cluster has this machine's cores and memory, no more
    run = set_up(cfg, log, config_name)  # every input is checked before anything starts
    with RunFiles(run.run_dir) as files:
        cluster, live = None, LiveRuntime()
        status, cause = "FAILED", None
        try:
            cluster = cl.connect(cfg)
            build = partial(Runtime.build, cfg, cluster, run.model_path, run.train_set.prompts, log=log)
            step, restarts = train_with_restarts(run, files, build, live)
            finish(run, files, live, step, restarts)
            status = "FINISHED"
            return 0
        except BaseException as exc:
            cause = exc
            raise
        finally:
            teardown([("runtime shutdown", live.shutdown), ("tracking close", lambda: run.tracker.close(status)),
                      ("run files upload", run.storage.push),
                      ("cluster shutdown", lambda: cluster.shutdown() if cluster else None)], cause)


class LiveRuntime:
    """The runtime of the attempt in progress (none between attempts), for the teardown."""

    def __init__(self):
        self.rt: Optional[DriverRuntime] = None

    def take(self) -> Optional[DriverRuntime]:
        rt, self.rt = self.rt, None
        return rt

    def shutdown(self) -> Optional[dict]:
        rt = self.take()
        return rt.shutdown() if rt is not None else None


def train_with_restarts(run: RunSetup, files: RunFiles, build: Callable[[], DriverRuntime],
                        live: LiveRuntime) -> tuple[int, int]:
    """Attempts until one ends; after a failure that restarts.what_died names (at most
    trainer.max_restarts of them) a new runtime from `build()` resumes from the last complete
    checkpoint. Returns (the step reached, restarts)."""
    cfg, log = run.cfg, run.log
    resume_from, meta, restarts = run.resume_from, run.meta, 0
    while True:
        try:
            live.rt = build()
            return attempt(live.rt, run, files, resume_from, meta, first=restarts == 0), restarts
        except Exception as exc:  # noqa: BLE001 - what_died decides; anything else goes on up
            what = what_died(exc)
            if what is None or restarts >= cfg.trainer.max_restarts:
                raise
            restarts += 1
            discard_runtime(live.take(), log)
            resume_from = ckpt.find_latest(run.storage.root)
            meta = ckpt.load_meta(resume_from) if resume_from is not None else None
            at = int(meta["step"]) if meta else 0
            files.truncate(at)
            log(f"restart {restarts}/{cfg.trainer.max_restarts}: {what}; resuming from "
                + (f"step {at} ({resume_from})" if meta else "the start (no checkpoint yet)"))


def attempt(rt: DriverRuntime, run: RunSetup, files: RunFiles, resume_from: Optional[str], meta: Optional[dict],
            first: bool) -> int:
    """On a freshly built runtime: restore (when resuming), evaluate at start, train to the end."""
    from ada_ray.driver.progress import Progress

    cfg = run.cfg
    rt.check_shared_dir(run.storage.root)
    step = restore(rt, resume_from, meta, run.log) if resume_from is not None else 0
    evaluate = make_evaluator(rt, cfg, run.eval_set, run.tracker, files)
    if first and step == 0 and cfg.trainer.eval_every > 0 and cfg.trainer.eval_at_start:
        evaluate(0, run.log)
    rt.start_sampling()
    progress = Progress(cfg.trainer.total_steps, cfg.trainer.progress, start=step, log=run.log)
    try:
        return train_steps(rt, run, files, step, meta, evaluate, progress)
    finally:
        progress.close()


def train_steps(rt: DriverRuntime, run: RunSetup, files: RunFiles, step: int, meta: Optional[dict], evaluate,
                progress) -> int:
    """The driver loop, from `step` to trainer.total_steps (or the data's or the sample budget's end):
    wait for a cohort, train on it, broadcast the new weights, log, evaluate and save when due."""
    cfg, t = run.cfg, run.cfg.trainer
    meter = SystemMeter(rt)
    generated = float(meta.get("generated_samples", 0.0)) if meta else 0.0
    while step < t.total_steps:
        timer = StepTimer()
        cohort = next_cohort(rt, step, cfg)
        if cohort is None:
            progress.message(f"data exhausted after {step} steps")
            break
        timer.lap("wait")
        m = cohort_metrics(cohort, step, cfg.algo.max_rounds)
        try:
            m.update({f"learner/{k}": v for k, v in rt.train(cohort, step).items()})
        except CohortPayloadsLost as e:  # a sampler died with samples of this cohort: sample them again
            n = rt.return_cohort(cohort, e.owners)
            progress.message(f"step {step}: {e}; {n} prompt(s) of the cohort are sampled again")
            continue
        generated += cohort.samples_generated
        files.record_trained(step, cohort)
        timer.lap("train")
        check_finite(m, cfg)
        step += 1
        m.update(rt.sync_weights(step))
        timer.lap("sync")
        m.update(meter.read(timer, m))
        m["train/samples_generated_total"] = generated
        budget_done = t.total_samples is not None and generated >= t.total_samples
        if due(t.eval_every, step) or (t.final_eval and (step == t.total_steps or budget_done)):
            m.update(evaluate(step, None))
        run.tracker.log_metrics(step, m)
        progress.update(step, m, _line(step, t.total_steps, m, meter.elapsed()))
        if t.save_every > 0 and (due(t.save_every, step) or step == t.total_steps):
            path = ckpt.save(run.storage, step, cfg, rt, run.model_path,
                             {"mlflow_run_id": run.tracker.run_id, "generated_samples": generated})
            progress.message(f"checkpoint {path}")
        if budget_done:
            progress.message(f"sample budget reached: {generated:.0f} generated samples after {step} steps")
            break
    return step


def next_cohort(rt: DriverRuntime, step: int, cfg: AdaRayConfig):
    """The cohort of `step`, or None when the data has run out; no cohort in time is an error."""
    cohort = rt.wait_cohort(step, timeout_s=cfg.sampler.lease_timeout_s)
    if cohort == Signal.TIMEOUT:
        raise TrainingError(f"no cohort for step {step} within sampler.lease_timeout_s = "
                            f"{cfg.sampler.lease_timeout_s}s; queue: {rt.queue_stats()}")
    return None if cohort == Signal.END else cohort


def finish(run: RunSetup, files: RunFiles, live: LiveRuntime, step: int, restarts: int) -> None:
    """The final policy, the work accounting, plots and artifacts; one closing line."""
    final_dir = save_final_policy(live.rt, run.storage, step, run.model_path)
    accounting = live.shutdown()
    files.write_accounting(accounting)
    finish_artifacts(run.run_dir, run.tracker, final_dir, run.log)
    run.log(f"done: {step} steps; accounting {accounting}" + (f"; {restarts} restart(s)" if restarts else ""))


def due(every: int, step: int) -> bool:
    """An every-N-steps action (eval, checkpoint) is due after `step` (0: never)."""
    return every > 0 and step % every == 0


def discard_runtime(rt, log) -> None:
    """Tear a broken runtime down before a restart; what fails on the way is logged, not raised."""
    if rt is None:
        return
    try:
        rt.shutdown()
    except Exception as exc:  # noqa: BLE001 - the runtime is already broken; its actors are killed anyway
        log(f"while discarding the failed runtime: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")


def teardown(steps: list, cause: Optional[BaseException]) -> None:
    """Run every (name, fn) teardown step, whatever fails. A failure never hides `cause`, the error
    that ended the run: it is added to the cause as a note (reported after it) and the cause goes on.
    Without a cause, the first failure is raised, with the later ones as its notes."""
    failures = []
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every step runs; what failed is reported below
            failures.append((name, exc))
    notes = [f"while shutting down: {name} failed: {type(exc).__name__}: {exc}" for name, exc in failures]
    if cause is not None:
        for note in notes:
            cause.add_note(note)
    elif failures:
        first = failures[0][1]
        for note in notes[1:]:
            first.add_note(note)
        raise first


def restore(rt, path: str, meta: dict, log) -> int:
    """Learner state from the checkpoint (a folder or a URI), the queue's state, and the samplers on
    those weights."""
    step = int(meta["step"])
    rt.load_learners(storage.join(path, "learner"), f"step_{step}")
    rt.load_queue(json.loads(storage.read_text(storage.join(path, "queue.json"))))
    rt.sync_weights(step)
    log(f"resumed from {path} at step {step}")
    return step


def make_evaluator(rt, cfg: AdaRayConfig, eval_set, tracker, files: RunFiles):
    """evaluate(step, log) -> metrics; each eval's per-prompt correct counts also go to the run's
    eval_per_prompt.jsonl."""

    def evaluate(step: int, log) -> dict:
        if eval_set is None:
            return {}
        res = rt.evaluate(eval_set.prompts, cfg.trainer.eval_samples, cfg.trainer.eval_temperature, cfg.trainer.seed,
                          cfg.sampler.max_new_tokens)
        files.record_eval(step, eval_set.prompts, res)
        m = res.metrics()
        if step == 0:
            tracker.log_metrics(0, m)
        if log:
            log(f"step {step} eval avg@{res.k} {res.avg_at_k:.4f} pass@{res.k} {res.pass_at_k:.4f}")
        return m

    return evaluate


def check_finite(m: dict, cfg: AdaRayConfig) -> None:
    streak = m.get("learner/nonfinite_streak", 0)
    if streak >= cfg.learner.max_nonfinite_steps:
        raise TrainingError(f"{int(streak)} training steps in a row had a NaN/inf loss and were skipped "
                            f"(learner.max_nonfinite_steps = {cfg.learner.max_nonfinite_steps}); lower learner.lr "
                            "or check the rewards and data")


def save_final_policy(rt, store: RunStorage, step: int, model_path: str) -> Path:
    """The policy in HF format to the run's final/ (learner 0 writes it; at a URI it uploads it), with
    ada_ray.json; the local folder holding it (at a URI: a copy in the staging folder, for MLflow)."""
    out = store.location("final")
    storage.delete(out)
    rt.save_learners(None, "final", out, model_path)
    storage.write_text(storage.join(out, "ada_ray.json"), json.dumps({"step": step}))
    return store.local_copy("final")


def finish_artifacts(run_dir: Path, tracker, final_dir: Path, log) -> None:
    from ada_ray.driver.plots import make_plots

    try:
        for p in make_plots(run_dir):
            tracker.log_artifact(p, "plots")
    except Exception as exc:  # noqa: BLE001 - plots must not fail a finished run
        log(f"plots failed: {exc}")
    tracker.log_artifact(run_dir / "accounting.json")
    tracker.log_artifact(final_dir, "final_policy")
    tracker.log_model(final_dir)


def _line(step: int, total: int, m: dict, elapsed: float) -> str:
    s = (f"step {step}/{total} reward {m['train/round0_reward']:.3f} kept {m['train/kept_reward']:.3f} "
         f"zero-signal {m['train/zero_signal_share']:.2f} samples/prompt {m['train/samples_per_prompt']:.1f} "
         f"(no-signal {m['train/no_signal_sample_share']:.2f}) "
         f"stale {m['train/staleness_mean']:.2f} groups/s {m['perf/groups_per_s']:.2f} "
         f"wait {m.get('time/wait', 0):.2f}s train {m.get('time/train', 0):.2f}s sync {m.get('time/sync', 0):.3f}s "
         f"loss {m.get('learner/loss', float('nan')):.4f}")
    avg = [k for k in m if k.startswith("eval/avg@") and "/" not in k[len("eval/avg@"):]]
    if avg:
        s += f" | eval {avg[0][5:]} {m[avg[0]]:.4f}"
    return s + f" [{elapsed:.0f}s]"
