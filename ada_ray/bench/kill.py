"""`ada-ray bench kill`: what a sampler's death costs a running job, in seconds without a cohort.

Two samplers train the embedded task (small steps); at step `kill_at` sampler 1 is SIGKILLed, in one
of two ways (`cases`):
- `sampling`: while it samples (its leased work and its reported, untrained samples die with it);
- `waiting`: right after the driver took a cohort holding samples of its (their payloads, off the queue,
  die with it: the learners' fetch fails, the cohort goes back to the queue, those prompts are sampled
  again).
Recorded per case: the arrival time of every cohort, the driver's interval between cohorts before the
kill (median), the seconds from the kill to the next cohort trained, the longest time without a trained
step from the kill on and its excess over that median (the kill's cost), how long the replacement took to start (the driver's log), prompts sampled again, and the
accounting. Each case is a fresh cluster; the steps around the kill are in the output for a plot.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from pathlib import Path
from typing import Optional

from ada_ray.bench.common import md_table, write_result

REPLACING = re.compile(r"sampler-(\d+) .*replacing it")


def _owners(cohort) -> set[str]:
    return {s.payload[0].owner for g in cohort.groups for s in g.samples if s.payload is not None}


def run_case(case: str, steps: int, kill_at: int, overrides: list[str], out_dir: Path) -> dict:
    import ray
    from transformers import AutoTokenizer

    from ada_ray.algo.payloads import CohortPayloadsLost
    from ada_ray.algo.types import Signal
    from ada_ray.config import load_config
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.driver import cluster as cl
    from ada_ray.driver.runtime import Runtime

    cfg = load_config("default", ["sampler.num_samplers=2", "trainer.ray_num_cpus=3", f"trainer.total_steps={steps}",
                                  "trainer.batch_prompts=16", "tracking.enabled=false",
                                  f"trainer.output_dir={out_dir}", *overrides])
    model_path = resolve_model_path(cfg)
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    logs: list[tuple[float, str]] = []
    cluster = cl.connect(cfg)
    rt = Runtime.build(cfg, cluster, model_path, train_set.prompts, log=lambda line: logs.append((time.time(), line)))
    arrivals: list[float] = []
    killed_at: Optional[float] = None
    returned = 0
    try:
        rt.start_sampling()
        victim, victim_pid = rt.sampler_id(1), ray.get(rt.samplers[1].pid.remote(), timeout=60)
        step = 0
        while step < steps:
            if case == "sampling" and step == kill_at and killed_at is None:
                os.kill(victim_pid, signal.SIGKILL)
                killed_at = time.time()
            cohort = rt.wait_cohort(step, timeout_s=600)
            if cohort in (Signal.TIMEOUT, Signal.END):
                raise RuntimeError(f"bench kill: no cohort {step} ({cohort})")
            if case == "waiting" and step >= kill_at and killed_at is None and victim in _owners(cohort):
                os.kill(victim_pid, signal.SIGKILL)
                killed_at = time.time()
            try:
                rt.train(cohort, step)
            except CohortPayloadsLost as e:
                returned += rt.return_cohort(cohort, e.owners)
                continue
            arrivals.append(time.time())
            rt.sync_weights(step + 1)
            step += 1
        stats = rt.queue_stats()
    finally:
        accounting = rt.shutdown()
        if cluster.started_here:
            cluster.shutdown()
    if killed_at is None:
        raise RuntimeError(f"bench kill ({case}): the kill never happened (victim had no samples in a cohort)")
    before = [b - a for a, b in zip(arrivals, arrivals[1:]) if b <= killed_at]
    after = [t for t in arrivals if t > killed_at]
    gaps_after = [b - a for a, b in zip([killed_at] + after, after)]  # from the kill on
    interval = statistics.median(before) if before else float("nan")
    replaced = [t for t, line in logs if REPLACING.search(line)]
    ready = [t for t, line in logs if "weight bus" in line or "broadcast" in line]
    return {"case": case, "steps": steps, "kill_at": kill_at, "interval_before_s": interval,
            "to_next_cohort_s": after[0] - killed_at if after else float("nan"),
            "longest_gap_after_s": max(gaps_after, default=float("nan")),
            # the kill's cost: the longest time without a trained step from the kill on, over the usual interval
            "cost_s": max(gaps_after, default=float("nan")) - interval,
            "detected_after_s": (replaced[0] - killed_at) if replaced else float("nan"),
            "cohorts_trained": len(arrivals), "returned_prompts": returned,
            "prompts_reissued": stats.get("prompts_reissued", 0), "replaced": rt.replaced,
            "accounting_ok": bool(accounting.get("items_ok") and accounting.get("prompts_ok")),
            "arrivals_s": [round(t - killed_at, 2) for t in arrivals], "log": [(round(t - killed_at, 2), line)
                                                                             for t, line in logs],
            "bus_events": len(ready)}


def run(steps: int = 14, kill_at: int = 5, cases: str = "sampling,waiting", out_dir: Path = Path("results"),
        smoke: bool = False, overrides: Optional[list[str]] = None) -> dict:
    if smoke:
        steps, kill_at = 5, 2
    rows = [run_case(c, steps, kill_at, list(overrides or []), out_dir / "kill_runs") for c in cases.split(",")]
    result = {"steps": steps, "kill_at": kill_at, "rows": rows}
    write_result(out_dir, "kill", result)
    return result


def format_table(result: dict) -> str:
    columns = ["kill", "interval between steps before (s)", "kill -> next step (s)", "longest gap after (s)", "cost (s)",
               "replacement asked for after (s)", "prompts sampled again", "accounting"]
    return md_table(columns, [[r["case"], f"{r['interval_before_s']:.2f}", f"{r['to_next_cohort_s']:.1f}",
                               f"{r['longest_gap_after_s']:.1f}", f"{r['cost_s']:.1f}", f"{r['detected_after_s']:.1f}",
                               r["prompts_reissued"], "ok" if r["accounting_ok"] else "BROKEN"]
                              for r in result["rows"]])
