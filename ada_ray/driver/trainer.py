"""The driver loop: `ada-ray train`. Reads like the algorithm it runs.

    build the runtime (queue, samplers, learners, weight bus) from the config; resume if asked
    for step in steps:
        cohort  <- wait for the B groups of this step (admission control bounds their staleness)
        metrics <- learners train on them (one DeepSpeed step per mini-batch)
        broadcast the new weights to every sampler; the queue learns the new version
        log; evaluate and checkpoint when due
    shut everything down; check the work accounting; plots and the final policy to MLflow

Async mode (default) lets samplers run ahead up to trainer.max_staleness versions; sync mode
samples each step's cohort with the current weights behind a round barrier, as the official
implementation does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

from ada_ray.driver import checkpoint as ckpt
from ada_ray.algo.types import Signal
from ada_ray.config import AdaRayConfig, flatten, to_yaml
from ada_ray.errors import AdaRayError
from ada_ray.driver.output_paths import resolve_output_dir
from ada_ray.driver.restarts import what_died
from ada_ray.driver.step_metrics import cohort_metrics


class TrainingError(AdaRayError, RuntimeError):
    pass


def run_dir_for(cfg: AdaRayConfig) -> Path:
    name = cfg.trainer.run_name or time.strftime(f"%Y%m%d-%H%M%S-{cfg.algo.name}")
    base, note = resolve_output_dir(cfg.trainer.output_dir)
    if note:
        print(f"ada-ray: {note}", file=sys.stderr)
    return base / name


class StepTimer:
    """Wall-clock split of a step into named parts."""

    def __init__(self):
        self.t = time.perf_counter()
        self.parts: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self.t
        self.t = now


def sampler_deltas(prev: list[dict], cur: list[dict]) -> dict[str, float]:
    busy = sum(c["busy_s"] - p["busy_s"] for p, c in zip(prev, cur))
    idle = sum(c["idle_s"] - p["idle_s"] for p, c in zip(prev, cur))
    upd = sum(c["update_s"] - p["update_s"] for p, c in zip(prev, cur))
    tokens = sum(c["tokens"] - p["tokens"] for p, c in zip(prev, cur))
    total = busy + idle + upd
    return {"sampler/idle_ratio": idle / total if total > 0 else 0.0, "sampler/tokens": float(tokens)}


def train(cfg: AdaRayConfig, log=print, config_name: Optional[str] = None) -> int:
    from transformers import AutoTokenizer

    from ada_ray.driver import cluster as cl
    from ada_ray.data.datasets import check_batch, load_splits
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.driver.progress import Progress
    from ada_ray.driver.runtime import Runtime
    from ada_ray.driver.tracking import Tracker, run_tags

    run_dir = run_dir_for(cfg)
    resume_from = ckpt.resolve_resume(cfg, run_dir)
    meta = None
    if resume_from is not None:
        meta = ckpt.load_meta(resume_from)
        ckpt.check_compatible(meta["config"], cfg, resume_from)
    model_path = resolve_model_path(cfg, log)
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, eval_set = load_splits(cfg.data, tok)
    check_batch(train_set, cfg.trainer.batch_prompts)  # before anything is written or started
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume_from is not None:
        truncate_logs(run_dir, int(meta["step"]))
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    log(f"run dir {run_dir}\nmodel {model_path}\n{len(train_set.prompts)} train prompts"
        + (f", {len(eval_set.prompts)} eval prompts" if eval_set else "")
        + (f" ({train_set.dropped_too_long} dropped as longer than data.max_prompt_tokens)"
           if train_set.dropped_too_long else ""))
    tracker = Tracker(run_dir, cfg.tracking.enabled, cfg.tracking.uri, cfg.tracking.experiment, run_dir.name, log,
                      resume_run_id=(meta or {}).get("mlflow_run_id"))
    tracker.log_params(flatten(cfg))
    tracker.set_tags(run_tags(cfg, model_path, config_name))
    tracker.log_dataset(train_set, "training")
    tracker.log_dataset(eval_set, "eval")
    tracker.log_artifact(run_dir / "config.yaml")
    cluster = cl.connect(cfg)
    rt: Optional[Runtime] = None
    status = "FAILED"
    cause: Optional[BaseException] = None

    def attempt(resume_from: Optional[Path], meta: Optional[dict], first: bool) -> int:
        """Build the runtime (from `resume_from` when given) and train until the end; the step reached."""
        nonlocal rt
        rt = Runtime.build(cfg, cluster, model_path, train_set.prompts, log=log)
        rt.check_shared_dir(run_dir)
        step = restore(rt, resume_from, meta, log) if resume_from is not None else 0
        evaluate = make_evaluator(rt, cfg, eval_set, tracker, run_dir)
        if first and step == 0 and cfg.trainer.eval_every > 0 and cfg.trainer.eval_at_start:
            evaluate(0, log)
        rt.start_sampling()
        progress = Progress(cfg.trainer.total_steps, cfg.trainer.progress, start=step, log=log)
        try:
            return train_steps(rt, cfg, run_dir, step, meta, evaluate, tracker, progress, model_path)
        finally:
            progress.close()

    try:
        restarts = 0
        while True:
            try:
                step = attempt(resume_from, meta, first=restarts == 0)
                break
            except Exception as exc:  # noqa: BLE001 - what_died decides; anything else goes on up
                what = what_died(exc)
                if what is None or restarts >= cfg.trainer.max_restarts:
                    raise
                restarts += 1
                discard_runtime(rt, log)
                rt = None
                resume_from = ckpt.find_latest(run_dir)
                meta = ckpt.load_meta(resume_from) if resume_from is not None else None
                at = int(meta["step"]) if meta else 0
                truncate_logs(run_dir, at)
                log(f"restart {restarts}/{cfg.trainer.max_restarts}: {what}; resuming from "
                    + (f"step {at} ({resume_from})" if meta else "the start (no checkpoint yet)"))
        final_dir = save_final_policy(rt, run_dir, step, model_path)
        accounting = rt.shutdown()
        rt = None
        (run_dir / "accounting.json").write_text(json.dumps(accounting, indent=2))
        finish_artifacts(run_dir, tracker, final_dir, log)
        log(f"done: {step} steps; accounting {accounting}" + (f"; {restarts} restart(s)" if restarts else ""))
        status = "FINISHED"
        return 0
    except BaseException as exc:
        cause = exc
        raise
    finally:
        teardown([("runtime shutdown", lambda: rt.shutdown() if rt is not None else None),
                  ("tracking close", lambda: tracker.close(status)), ("cluster shutdown", cluster.shutdown)], cause)


def train_steps(rt, cfg: AdaRayConfig, run_dir: Path, step: int, meta: Optional[dict], evaluate, tracker, progress,
                model_path: str) -> int:
    """The driver loop, from `step` to trainer.total_steps (or the data's or the sample budget's end):
    wait for a cohort, train on it, broadcast the new weights, log, evaluate and save when due."""
    prev = rt.sampler_stats()
    t_start = time.time()
    generated = float(meta.get("generated_samples", 0.0)) if meta else 0.0
    with open(run_dir / "trained_prompts.jsonl", "a") as trained_log:  # audit: which prompts each step trained
        while step < cfg.trainer.total_steps:
            timer = StepTimer()
            cohort = rt.wait_cohort(step, timeout_s=cfg.sampler.lease_timeout_s)
            if cohort == Signal.TIMEOUT:
                raise TrainingError(f"no cohort for step {step} within sampler.lease_timeout_s = "
                                    f"{cfg.sampler.lease_timeout_s}s; queue: {rt.queue_stats()}")
            if cohort == Signal.END:
                progress.message(f"data exhausted after {step} steps")
                break
            timer.lap("wait")
            generated += cohort.samples_generated
            trained_log.write(json.dumps({"step": step, "prompts": [g.prompt_id for g in cohort.groups],
                                          "dropped": [g.prompt_id for g in cohort.dropped]}) + "\n")
            trained_log.flush()
            m = cohort_metrics(cohort, step, cfg.algo.max_rounds)
            m.update({f"learner/{k}": v for k, v in rt.train(cohort, step).items()})
            timer.lap("train")
            check_finite(m, cfg)
            step += 1
            m.update(rt.sync_weights(step))
            timer.lap("sync")
            prev = system_metrics(rt, prev, timer, t_start, m)
            m["train/samples_generated_total"] = generated
            budget_done = cfg.trainer.total_samples is not None and generated >= cfg.trainer.total_samples
            last = step == cfg.trainer.total_steps or budget_done
            if due(cfg.trainer.eval_every, step) or (last and cfg.trainer.final_eval):
                m.update(evaluate(step, None))
            tracker.log_metrics(step, m)
            progress.update(step, m, _line(step, cfg.trainer.total_steps, m, time.time() - t_start))
            if cfg.trainer.save_every > 0 and (due(cfg.trainer.save_every, step) or step == cfg.trainer.total_steps):
                path = ckpt.save(run_dir, step, cfg, rt, model_path, {"mlflow_run_id": tracker.run_id,
                                                                       "generated_samples": generated})
                progress.message(f"checkpoint {path}")
            if budget_done:
                progress.message(f"sample budget reached: {generated:.0f} generated samples after {step} steps")
                break
    return step


def due(every: int, step: int) -> bool:
    """An every-N-steps action (eval, checkpoint) is due after `step` (0: never)."""
    return every > 0 and step % every == 0


def system_metrics(rt, prev: list[dict], timer: StepTimer, t_start: float, m: dict) -> list[dict]:
    """Add the step's sampler, queue, timing and throughput metrics to `m`; returns the sampler stats
    the next step's deltas start from."""
    cur = rt.sampler_stats()
    m.update(sampler_deltas(prev, cur))
    for i, st in enumerate(cur):
        m[f"sampler/{i}/samples_total"] = float(st["samples"])
        m[f"sampler/{i}/version"] = float(st["version"])
    m["sampler/replaced_total"] = float(rt.replaced)
    q = rt.queue_stats()
    m.update({"queue/busy_s_total": q["busy_s"], "queue/calls_total": float(q["calls"]),
              "time/elapsed": time.time() - t_start})
    step_s = sum(timer.parts.values())
    m.update({f"time/{k}": v for k, v in timer.parts.items()})
    m.update({"time/step": step_s, "perf/groups_per_s": m["train/groups"] / step_s,
              "perf/tokens_per_s": m["sampler/tokens"] / step_s,
              "learner/idle_ratio": max(0.0, 1.0 - m.get("learner/train_seconds", 0.0) / step_s)})
    return cur


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


def truncate_logs(run_dir: Path, step: int) -> None:
    """A resume at `step` redoes what came after it: drop those lines from the run's logs."""
    for name, keep in (("metrics.jsonl", lambda r: r["step"] <= step), ("trained_prompts.jsonl", lambda r: r["step"] < step),
                       ("eval_per_prompt.jsonl", lambda r: r["step"] <= step)):
        p = run_dir / name
        if p.is_file():
            rows = [line for line in p.read_text().splitlines() if line.strip() and keep(json.loads(line))]
            p.write_text("".join(r + "\n" for r in rows))


def restore(rt, path: Path, meta: dict, log) -> int:
    """Learner state from the checkpoint, the queue's state, and the samplers on those weights."""
    step = int(meta["step"])
    rt.load_learners(str(path / "learner"), f"step_{step}")
    rt.load_queue(json.loads((path / "queue.json").read_text()))
    rt.sync_weights(step)
    log(f"resumed from {path} at step {step}")
    return step


def make_evaluator(rt, cfg: AdaRayConfig, eval_set, tracker, run_dir: Path):
    """evaluate(step, log) -> metrics; each eval's per-prompt correct counts also go to
    eval_per_prompt.jsonl in the run dir (what paired comparisons and difficulty buckets need)."""

    def evaluate(step: int, log) -> dict:
        if eval_set is None:
            return {}
        res = rt.evaluate(eval_set.prompts, cfg.trainer.eval_samples, cfg.trainer.eval_temperature, cfg.trainer.seed,
                          cfg.sampler.max_new_tokens)
        with open(run_dir / "eval_per_prompt.jsonl", "a") as fh:
            fh.write(json.dumps({"step": step, "k": res.k, "ids": [p.prompt_id for p in eval_set.prompts],
                                 "difficulty": [p.difficulty for p in eval_set.prompts], "correct": res.correct}) + "\n")
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


def save_final_policy(rt, run_dir: Path, step: int, model_path: str) -> Path:
    out = run_dir / "final"
    rt.save_learners(str(run_dir / ".final_ds"), "final", str(out), model_path)
    import shutil

    shutil.rmtree(run_dir / ".final_ds", ignore_errors=True)
    (out / "ada_ray.json").write_text(json.dumps({"step": step}))
    return out


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
         f"stale {m['train/staleness_mean']:.2f} groups/s {m['perf/groups_per_s']:.2f} "
         f"wait {m.get('time/wait', 0):.2f}s train {m.get('time/train', 0):.2f}s sync {m.get('time/sync', 0):.3f}s "
         f"loss {m.get('learner/loss', float('nan')):.4f}")
    avg = [k for k in m if k.startswith("eval/avg@") and "/" not in k[len("eval/avg@"):]]
    if avg:
        s += f" | eval {avg[0][5:]} {m[avg[0]]:.4f}"
    return s + f" [{elapsed:.0f}s]"
