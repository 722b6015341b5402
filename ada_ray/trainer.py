"""The driver loop: `ada-ray train`. Reads like the algorithm it runs.

    build the runtime (queue, samplers, learners, weight bus) from the config
    for step in steps:
        cohort  <- wait for the B groups of this step (admission control bounds their staleness)
        metrics <- learners train on them (one DeepSpeed step per mini-batch)
        broadcast the new weights to every sampler; the queue learns the new version
        log; evaluate and checkpoint when due
    shut everything down; check the work accounting

Async mode (default) lets samplers run ahead up to trainer.max_staleness versions; sync mode
samples each step's cohort with the current weights behind a round barrier, as the official
implementation does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from ada_ray.config import AdaRayConfig, to_yaml
from ada_ray.step_metrics import cohort_metrics


class TrainingError(RuntimeError):
    pass


def run_dir_for(cfg: AdaRayConfig) -> Path:
    name = cfg.trainer.run_name or time.strftime(f"%Y%m%d-%H%M%S-{cfg.algo.name}")
    return Path(cfg.trainer.output_dir).expanduser().resolve() / name


class StepTimer:
    """Wall-clock split of a step and the samplers' busy/idle deltas over it."""

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


def train(cfg: AdaRayConfig, log=print) -> int:
    from transformers import AutoTokenizer

    from ada_ray import cluster as cl
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.runtime import Runtime

    run_dir = run_dir_for(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    model_path = resolve_model_path(cfg, log)
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, eval_set = load_splits(cfg.data, tok)
    log(f"run dir {run_dir}\nmodel {model_path}\n{len(train_set.prompts)} train prompts"
        + (f", {len(eval_set.prompts)} eval prompts" if eval_set else "")
        + (f" ({train_set.dropped_too_long} dropped as longer than data.max_prompt_tokens)" if train_set.dropped_too_long else ""))
    cluster = cl.connect(cfg)
    rt: Optional[Runtime] = None
    metrics_file = open(run_dir / "metrics.jsonl", "a")
    try:
        rt = Runtime.build(cfg, cluster, model_path, train_set.prompts, log=log)
        t_start = time.time()
        if eval_set and cfg.trainer.eval_every > 0:
            res = rt.evaluate(eval_set.prompts, cfg.trainer.eval_samples, cfg.trainer.eval_temperature, cfg.trainer.seed)
            _write(metrics_file, 0, res.metrics())
            log(f"step 0 eval avg@{res.k} {res.avg_at_k:.4f} pass@{res.k} {res.pass_at_k:.4f}")
        rt.start_sampling()
        prev = rt.sampler_stats()
        step = 0
        while step < cfg.trainer.total_steps:
            timer = StepTimer()
            cohort = rt.wait_cohort(step, timeout_s=cfg.sampler.lease_timeout_s)
            if cohort is None:
                raise TrainingError(f"no cohort for step {step} within sampler.lease_timeout_s = "
                                    f"{cfg.sampler.lease_timeout_s}s; queue: {rt.queue_stats()}")
            if cohort == "end":
                log(f"data exhausted after {step} steps")
                break
            timer.lap("wait")
            m = cohort_metrics(cohort, step, cfg.algo.max_rounds)
            m.update({f"learner/{k}": v for k, v in rt.train(cohort, step).items()})
            timer.lap("train")
            if m.get("learner/nonfinite_streak", 0) >= cfg.learner.max_nonfinite_steps:
                raise TrainingError(f"{int(m['learner/nonfinite_streak'])} training steps in a row had a NaN/inf "
                                    f"loss (learner.max_nonfinite_steps = {cfg.learner.max_nonfinite_steps}); "
                                    "lower learner.lr or check the rewards")
            step += 1
            m.update(rt.sync_weights(step))
            timer.lap("sync")
            cur = rt.sampler_stats()
            m.update(sampler_deltas(prev, cur))
            prev = cur
            step_s = sum(timer.parts.values())
            m.update({f"time/{k}": v for k, v in timer.parts.items()})
            m.update({"time/step": step_s, "perf/groups_per_s": m["train/groups"] / step_s,
                      "perf/tokens_per_s": m["sampler/tokens"] / step_s,
                      "learner/idle_ratio": 1.0 - m.get("learner/train_seconds", 0.0) / step_s})
            if eval_set and cfg.trainer.eval_every > 0 and step % cfg.trainer.eval_every == 0:
                res = rt.evaluate(eval_set.prompts, cfg.trainer.eval_samples, cfg.trainer.eval_temperature,
                                  cfg.trainer.seed)
                m.update(res.metrics())
                timer.lap("eval")
            _write(metrics_file, step, m)
            log(_line(step, cfg.trainer.total_steps, m, time.time() - t_start))
        accounting = rt.shutdown()
        rt = None
        (run_dir / "accounting.json").write_text(json.dumps(accounting, indent=2))
        log(f"done: {step} steps in {time.time() - t_start:.0f}s; accounting {accounting}")
        return 0
    finally:
        metrics_file.close()
        if rt is not None:
            rt.shutdown()
        cluster.shutdown() if cluster.started_here else None


def _write(fh, step: int, m: dict) -> None:
    fh.write(json.dumps({"step": step, **{k: float(v) for k, v in m.items()}}) + "\n")
    fh.flush()


def _line(step: int, total: int, m: dict, elapsed: float) -> str:
    s = (f"step {step}/{total} reward {m['train/round0_reward']:.3f} kept {m['train/kept_reward']:.3f} "
         f"zero-signal {m['train/zero_signal_share']:.2f} samples/prompt {m['train/samples_per_prompt']:.1f} "
         f"stale {m['train/staleness_mean']:.2f} groups/s {m['perf/groups_per_s']:.2f} "
         f"wait {m.get('time/wait', 0):.2f}s train {m.get('time/train', 0):.2f}s sync {m.get('time/sync', 0):.3f}s "
         f"loss {m.get('learner/loss', float('nan')):.4f}")
    if "eval/pass@1" in m:
        s += f" | eval avg {m[[k for k in m if k.startswith('eval/avg@')][0]]:.4f}"
    return s + f" [{elapsed:.0f}s]"
