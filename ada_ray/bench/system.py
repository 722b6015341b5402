"""`ada-ray bench system`: the async premium, measured on the real runtime with the same resources
for every row.

Rows: grpo n=4 / ada_seq_pos / ada_seq_balance in async mode, grpo and ada_seq_balance in sync
mode, and ada_seq_balance async with S:L = 2:1. For each: seconds per step and its split (waiting
for the cohort, training, weight sync), groups/s, generated samples per step, sampler and learner
idle ratios, weight-sync seconds and MB/s. Ratios are taken inside one run of this bench:
  step-time ratio ada / grpo (async),   samples ratio ada / grpo,   system premium = their quotient
  (target <= 1.1: everything beyond the extra samples is what the system must remove),
  groups/s async / sync.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from ada_ray.bench.common import BATCH_PROMPTS, bar_chart, write_result
from ada_ray.config import load_config

ROWS = [
    ("grpo_async", "grpo", {}),
    ("ada_seq_pos_async", "ada_seq_pos", {}),
    ("ada_seq_balance_async", "ada_seq_balance", {}),
    ("grpo_sync", "grpo", {"trainer.mode": "sync"}),
    ("ada_seq_balance_sync", "ada_seq_balance", {"trainer.mode": "sync"}),
    ("ada_seq_balance_async_S2", "ada_seq_balance", {"sampler.num_samplers": 2, "trainer.ray_num_cpus": 3}),
]

KEYS = {"time/step": "step_s", "time/wait": "wait_s", "time/train": "train_s", "time/sync": "sync_s",
        "perf/groups_per_s": "groups_per_s", "train/samples_generated": "samples_per_step",
        "sampler/idle_ratio": "sampler_idle", "learner/idle_ratio": "learner_idle",
        "sync/seconds": "sync_total_s", "sync/mb_per_s": "sync_mb_per_s", "perf/tokens_per_s": "tokens_per_s",
        "train/staleness_mean": "staleness"}


def summarize(metrics_file: Path, skip: int) -> dict:
    rows = [json.loads(x) for x in metrics_file.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "time/step" in r][skip:]
    out = {}
    for key, name in KEYS.items():
        vals = [r[key] for r in rows if key in r]
        out[name] = statistics.mean(vals) if vals else float("nan")
    total_time = sum(r["time/step"] for r in rows)
    out["groups_per_s_overall"] = sum(r["train/groups"] for r in rows) / total_time if total_time else float("nan")
    out["steps_measured"] = len(rows)
    return out


def run(steps: int = 30, skip: int = 5, out_dir: Path = Path("results"), smoke: bool = False,
        overrides: list[str] | None = None, rows=None) -> dict:
    from ada_ray.driver.trainer import train

    if smoke:
        steps, skip = 3, 1
        rows = rows or [ROWS[0], ROWS[2], ROWS[4]]
    work = out_dir / "system_runs"
    shutil.rmtree(work, ignore_errors=True)
    table = {}
    for name, preset, extra in rows or ROWS:
        ov = [f"trainer.total_steps={steps}", f"trainer.batch_prompts={BATCH_PROMPTS}", "trainer.eval_every=0",
              f"trainer.output_dir={work}", f"trainer.run_name={name}", "tracking.enabled=false", "trainer.progress=plain"]
        ov += [f"{k}={v}" for k, v in extra.items()] + list(overrides or [])
        cfg = load_config(preset, ov)
        train(cfg, log=lambda s: None)
        table[name] = summarize(work / name / "metrics.jsonl", skip)
    g, b, p = table.get("grpo_async"), table.get("ada_seq_balance_async"), table.get("ada_seq_pos_async")
    ratios = {}
    for label, row in (("balance", b), ("pos", p)):
        if g and row:
            step_ratio = row["step_s"] / g["step_s"]
            samples_ratio = row["samples_per_step"] / g["samples_per_step"]
            ratios[f"{label}_step_ratio"] = step_ratio
            ratios[f"{label}_samples_ratio"] = samples_ratio
            ratios[f"{label}_system_premium"] = step_ratio / samples_ratio
    for algo in ("grpo", "ada_seq_balance"):
        a, s = table.get(f"{algo}_async"), table.get(f"{algo}_sync")
        if a and s:
            ratios[f"{algo}_async_vs_sync_groups_per_s"] = a["groups_per_s_overall"] / s["groups_per_s_overall"]
    result = {"steps": steps, "skip": skip, "rows": table, "ratios": ratios, "overrides": list(overrides or [])}
    write_result(out_dir, "system", result)
    bar_chart(out_dir / "system.png", "seconds per step and its split", "seconds",
              {name: {"step": r["step_s"], "wait for cohort": r["wait_s"], "train": r["train_s"], "weight sync": r["sync_s"]}
               for name, r in table.items()})
    return result


def format_table(result: dict) -> str:
    cols = ["step_s", "wait_s", "train_s", "sync_s", "groups_per_s_overall", "samples_per_step", "sampler_idle",
            "learner_idle", "sync_total_s", "sync_mb_per_s", "staleness"]
    lines = ["| row | " + " | ".join(cols) + " |", "| --- " * (len(cols) + 1) + "|"]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | " + " | ".join(f"{r[c]:.3g}" for c in cols) + " |")
    lines.append("")
    lines += [f"- {k}: {v:.3f}" for k, v in result["ratios"].items()]
    return "\n".join(lines)
