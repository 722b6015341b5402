"""`ada-ray bench levers`: what each cost lever does to where the samples go, lever by lever, in seconds.

The real scheduler (algo/, no Ray, no model) replays `steps` steps of B prompts against a fixed policy:
each training prompt's pass rate is the base policy's pass@16 on it (measured once, cached by `bench
budget`), each sample a Bernoulli draw seeded by its work item. Each row is one lever switched on over
the row before it or over the paper's Seq-balance; per row: samples per prompt (and relative to
GRPO-n4's 4), the share of trained groups with a usable pair (non-zero advantage), the share of samples
spent on prompts that ended with no signal, usable groups per 1,000 samples, and prompts parked per
step. What it cannot say: how a lever changes learning (the policy here never improves, so parked
prompts never come back on their own) - `bench budget` trains for that.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Optional

from ada_ray.bench.common import write_result

# (row, algo.name, overrides): the paper's methods, then ada_budget's levers one at a time, then the default
LEVERS = [
    ("grpo_n4", "grpo", {}),
    ("seq_balance R=4 (paper)", "ada_seq_balance", {}),
    ("seq_balance R=2 (round cap)", "ada_seq_balance", {"max_rounds": 2}),
    ("+ posterior round sizes, cap 16", "ada_budget", {"budget_max_samples": 16, "park_below": 0.0}),
    ("+ park hopeless (P < 0.1)", "ada_budget", {"budget_max_samples": 16, "park_below": 0.1}),
    ("+ park P < 0.25", "ada_budget", {"budget_max_samples": 16}),
    ("+ cap 12 (the default)", "ada_budget", {}),
    ("default, settle_target 0.7", "ada_budget", {"settle_target": 0.7}),
    ("default, explore_floor 0.2", "ada_budget", {"explore_floor": 0.2}),
    ("default, K_pos = K_neg = 1", "ada_budget", {"k_pos": 1, "k_neg": 1}),
    ("default, cap 8", "ada_budget", {"budget_max_samples": 8}),
    ("cap 8, park on a pair", "ada_budget", {"budget_max_samples": 8, "park_need": "pair"}),
    ("cap 8, probe 4", "ada_budget", {"budget_max_samples": 8, "probe_samples": 4}),
]


ADA_BUDGET_BASE = {"max_rounds": 2, "budget_max_samples": 12, "park_below": 0.25, "probe_samples": 0}  # the default, under each row


def row_settings(name: str, overrides: dict) -> dict:
    """A row's algo settings: an ada_budget row's overrides over ADA_BUDGET_BASE, any other row's as given."""
    return {**ADA_BUDGET_BASE, **overrides} if name == "ada_budget" else overrides


def replay(rates: dict[str, float], name: str, overrides: dict, steps: int, batch: int, seed: int) -> dict:
    """`steps` cohorts of the real WorkScheduler against fixed per-prompt pass rates (`row_settings`: a
    row says exactly what it changes)."""
    from ada_ray.algo.scheduler import WorkScheduler
    from ada_ray.algo.types import Prompt, Sample
    from ada_ray.config import AlgoConfig

    prompts = [Prompt(pid, "q", (1,), "a", "") for pid in rates]
    algo = AlgoConfig(name=name, **row_settings(name, overrides))
    s = WorkScheduler(prompts, algo, batch_prompts=batch, total_steps=steps, seed=seed)
    samples = groups = usable = skipped = nosig = 0
    for c in range(steps):
        while items := s.lease("sim", 1 << 20, 0.0):
            for it in items:
                rng, p = random.Random(it.seed), rates[it.prompt_id]
                s.report("sim", it.item_id, [Sample(it.prompt_id, [1], [0.0], 1.0 if rng.random() < p else 0.0, version=c)
                                             for _ in range(it.num_samples)])
        res = s.take_cohort(c)
        s.set_version(c + 1)
        samples += res.samples_generated
        skipped += res.skipped
        for g in res.groups:
            groups += 1
            if g.zero_signal:
                nosig += g.pool_size
            else:
                usable += 1
    s.check_accounting()
    return {"samples_per_prompt": samples / groups, "usable_share": usable / groups,
            "no_signal_sample_share": nosig / samples, "usable_per_1k_samples": 1000 * usable / samples,
            "parked_per_step": skipped / steps}


def run(steps: int = 300, batch: int = 64, seeds: int = 3, out_dir: Path = Path("results"), smoke: bool = False,
        overrides: Optional[list[str]] = None) -> dict:
    from ada_ray.bench.budget import base_train_rates, rates_path

    overrides = list(overrides or [])
    if smoke:
        steps, seeds, batch = 20, 1, 16
        overrides = ["data.train_per_level=24", *overrides]
    work = out_dir / "budget_runs"
    work.mkdir(parents=True, exist_ok=True)
    data_ov = [o for o in overrides if (o.startswith("data.") or o.startswith("model.")) and "eval_per_level" not in o]
    r = base_train_rates(data_ov, rates_path(work, data_ov))
    rates = {i: c / r["k"] for i, c in zip(r["ids"], r["correct"])}
    rows = []
    for label, name, ov in LEVERS:
        per_seed = [replay(rates, name, ov, steps, batch, seed) for seed in range(seeds)]
        rows.append({"lever": label, "algo": name, "overrides": row_settings(name, ov),
                     **{k: statistics.mean(x[k] for x in per_seed) for k in per_seed[0]}})
    result = {"steps": steps, "batch": batch, "seeds": seeds, "train_prompts": len(rates),
              "base_avg16_train": statistics.mean(rates.values()), "rows": rows}
    write_result(out_dir, "levers", result)
    return result


def format_table(result: dict) -> str:
    lines = [f"replay of {result['steps']} steps x {result['batch']} prompts against the base policy's pass@16 on "
             f"{result['train_prompts']} training prompts (mean {result['base_avg16_train']:.3f}); {result['seeds']} seeds",
             "", "| lever | samples/prompt | x GRPO-n4 | usable groups | samples on no-signal prompts | usable per 1k samples "
             "| parked/step |", "| --- " * 7 + "|"]
    for r in result["rows"]:
        lines.append(f"| {r['lever']} | {r['samples_per_prompt']:.1f} | {r['samples_per_prompt'] / 4:.2f} | "
                     f"{r['usable_share']:.2f} | {r['no_signal_sample_share']:.2f} | {r['usable_per_1k_samples']:.1f} | "
                     f"{r['parked_per_step']:.1f} |")
    return "\n".join(lines)
