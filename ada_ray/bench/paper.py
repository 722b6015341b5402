"""`ada-ray bench paper`: the paper's comparison (Reinforce-Ada v3, Table 2 and App. C.1) on the
embedded task, in this system.

Every method starts from the same base policy and recipe and trains the same number of steps on the
same batch of B prompts: grpo n=4, n=8, n=16, dapo, ada_seq_pos, ada_seq_balance, ada_est, and the
default method (`ada-ray train`'s, conf/default.yaml) when it is none of these, with the same seeds (fixed
up front, seed0 .. seed0+seeds-1) for every method, run seed-major; a cut bench resumes. Each run evaluates the held-out split every
`eval_every` steps (avg@16, pass@16, per-prompt counts in eval_per_prompt.jsonl). Reported:

- final avg@16 / pass@16 per method (mean ± std over seeds) and each method's difference to grpo
  n=4, paired by seed (mean and standard error over seeds) and paired by prompt (standard error over
  held-out prompts of the seed-averaged difference: the eval noise alone);
- final avg@16 per bucket of the base policy's pass@16 on each prompt: 0, (0, 0.2], (0.2, 0.5], (0.5, 1];
- generated samples, wall time, zero-signal share, and the steps and generated samples each run
  needed to reach grpo n=4's final eval (mean over its seeds);
- curves of eval vs step and vs generated samples (paper_eval.png), and `paper_table.json`.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
from pathlib import Path

from ada_ray.bench.common import finish_eval_figure, write_result
from ada_ray.config import ConfigError, load_config

METHODS = [
    ("grpo_n4", "grpo", {"algo.n": 4}),
    ("grpo_n8", "grpo", {"algo.n": 8}),
    ("grpo_n16", "grpo", {"algo.n": 16}),
    ("dapo", "dapo", {}),
    ("ada_seq_pos", "ada_seq_pos", {}),
    ("ada_seq_balance", "ada_seq_balance", {}),
    ("ada_est", "ada_est", {}),
]
DEFAULT_PRESET = "default"  # the method `ada-ray train` uses: conf/default.yaml
BUCKETS = (("0", 0.0, 0.0), ("(0,0.2]", 0.0, 0.2), ("(0.2,0.5]", 0.2, 0.5), ("(0.5,1]", 0.5, 1.0))


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def bucket_of(rate: float) -> str:
    for name, lo, hi in BUCKETS:
        if (rate == 0.0 and hi == 0.0) or lo < rate <= hi:
            return name
    raise ValueError(f"pass rate {rate} outside [0, 1]")


def read_run(run_dir: Path) -> dict:
    """One run's eval curve (step, cumulative generated samples, avg@k, pass@k), its final per-prompt
    counts, and its totals, from metrics.jsonl and eval_per_prompt.jsonl."""
    rows = _rows(run_dir / "metrics.jsonl")
    samples_at: dict[int, float] = {0: 0.0}
    for r in rows:
        if "train/samples_generated_total" in r:
            samples_at[r["step"]] = r["train/samples_generated_total"]
    evals = _rows(run_dir / "eval_per_prompt.jsonl")
    curve = [{"step": e["step"], "samples": samples_at.get(e["step"], float("nan")), **_point(e)} for e in evals]
    train_rows = [r for r in rows if "train/zero_signal_share" in r]
    return {
        "curve": curve, "final": evals[-1] if evals else None, "first": evals[0] if evals else None,
        "samples": max(samples_at.values()), "steps": len(train_rows),
        "wall_s": max((r.get("time/elapsed", 0.0) for r in rows), default=float("nan")),
        "zero_signal_share": statistics.mean(r["train/zero_signal_share"] for r in train_rows) if train_rows else float("nan"),
    }


def reach(curve: list[dict], target: float, key: str) -> float:
    """The first eval point's `key` (step or samples) whose avg reaches `target` (nan: never)."""
    for pt in curve:
        if pt["step"] > 0 and pt["avg"] >= target:
            return float(pt[key])
    return float("nan")


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    vals = [v for v in vals if v == v]
    if not vals:
        return float("nan"), float("nan")
    return statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def summarize(runs: dict[str, list[dict]], base: dict, steps: int, batch: int) -> dict:
    """The machine-readable table (`paper_table.json`) from the runs of every method and the base
    policy's per-prompt eval counts."""
    k = base["k"]
    base_rate = [c / k for c in base["correct"]]
    table: dict = {"base": {"avg16": sum(base_rate) / len(base_rate), "k": k, "prompts": len(base_rate),
                            "buckets": {}},
                   "steps": steps, "batch": batch, "methods": {}}
    bucket_ix = {b: [i for i, r in enumerate(base_rate) if bucket_of(r) == b] for b, _, _ in BUCKETS}
    table["base"]["buckets"] = {b: {"prompts": len(ix), "avg16": sum(base_rate[i] for i in ix) / len(ix) if ix else None}
                                for b, ix in bucket_ix.items()}
    g = runs.get("grpo_n4", [])
    g_final = _mean_sd([r["final_avg"] for r in g])[0] if g else float("nan")
    for name, rs in runs.items():
        m = {"avg16": [r["final_avg"] for r in rs], "pass16": [r["final_pass"] for r in rs],
             "samples": [r["samples"] for r in rs], "wall_s": [r["wall_s"] for r in rs],
             "zero_signal_share": [r["zero_signal_share"] for r in rs],
             "steps_to_grpo_n4_final": [reach(r["curve"], g_final, "step") for r in rs],
             "samples_to_grpo_n4_final": [reach(r["curve"], g_final, "samples") for r in rs],
             "seeds": [r["seed"] for r in rs]}
        m["buckets"] = {}
        for b, ix in bucket_ix.items():
            if ix:
                m["buckets"][b] = [sum(r["final_correct"][i] for i in ix) / (k * len(ix)) for r in rs]
        if name != "grpo_n4" and g:
            by_seed = {r["seed"]: r for r in g}
            pairs = [(r, by_seed[r["seed"]]) for r in rs if r["seed"] in by_seed]
            d = [a["final_avg"] - b["final_avg"] for a, b in pairs]
            mean, sd = _mean_sd(d)
            per_prompt = [statistics.mean((a["final_correct"][i] - b["final_correct"][i]) / k for a, b in pairs)
                          for i in range(len(base_rate))] if pairs else []
            m["diff_to_grpo_n4"] = {
                "mean": mean, "se_seeds": sd / math.sqrt(len(d)) if len(d) > 1 else float("nan"),
                "se_prompts": statistics.stdev(per_prompt) / math.sqrt(len(per_prompt)) if len(per_prompt) > 1 else float("nan"),
                "per_seed": d}
        table["methods"][name] = m
    return table


def run(steps: int = 100, batch: int = 32, seeds: int = 3, seed0: int = 0, eval_every: int = 25,
        out_dir: Path = Path("results"), smoke: bool = False, overrides: list[str] | None = None,
        methods: str | None = None) -> dict:
    """Train every chosen method on seeds seed0 .. seed0+seeds-1, seed-major (each seed runs every method
    before the next seed starts, so machine drift hits all methods alike). Each finished run's summary is
    written to <out>/paper_runs/<method>_s<seed>.json with the bench's parameters as its signature: a cut
    bench started again with the same parameters resumes where it stopped."""
    from ada_ray.driver.trainer import train

    overrides = list(overrides or [])
    chosen = [*METHODS, *_default_row(overrides)]
    if methods:
        names = methods.split(",")
        unknown = [n for n in names if n not in {m[0] for m in chosen}]
        if unknown:
            raise ConfigError(f"bench paper: unknown methods {unknown}; choose from {[m[0] for m in chosen]}")
        chosen = [m for m in chosen if m[0] in names]
    if smoke:
        steps, seeds, eval_every = 4, 1, 2
        chosen = [m for m in chosen if m[0] in ("grpo_n4", "ada_seq_balance")]
        overrides = ["data.train_per_level=24", "data.eval_per_level=8", "trainer.eval_samples=16",
                     "sampler.max_num_seqs=128", *overrides]
        batch = min(batch, 6)
    work = out_dir / "paper_runs"
    work.mkdir(parents=True, exist_ok=True)
    signature = {"steps": steps, "batch": batch, "eval_every": eval_every, "overrides": overrides}
    runs: dict[str, list[dict]] = {}
    base = None
    for seed in range(seed0, seed0 + seeds):
        for name, preset, extra in chosen:
            run_name = f"{name}_s{seed}"
            summary_path = work / f"{run_name}.json"
            if summary_path.is_file() and json.loads(summary_path.read_text()).get("signature") == signature:
                summary = json.loads(summary_path.read_text())
            else:
                first = base is None and not _has_base(work, signature)
                ov = [f"trainer.total_steps={steps}", f"trainer.batch_prompts={batch}",
                      f"trainer.eval_every={eval_every}", f"trainer.eval_at_start={'true' if first else 'false'}",
                      "trainer.final_eval=true", "trainer.eval_samples=16", "trainer.total_samples=null",
                      f"trainer.output_dir={work / 'runs'}", f"trainer.run_name={run_name}", f"trainer.seed={seed}",
                      "tracking.enabled=false", "trainer.progress=plain", "trainer.save_every=0",
                      *[f"{k}={v}" for k, v in extra.items()], *overrides]
                shutil.rmtree(work / "runs" / run_name, ignore_errors=True)
                train(load_config(preset, ov), log=lambda s: None)
                r = read_run(work / "runs" / run_name)
                summary = {"signature": signature, "method": name, "seed": seed,
                           "base": r["first"] if first else None,
                           **{k: v for k, v in r.items() if k not in ("final", "first")},
                           "final_avg": r["curve"][-1]["avg"], "final_pass": r["curve"][-1]["pass"],
                           "final_correct": r["final"]["correct"]}
                summary_path.write_text(json.dumps(summary))
                print(f"bench paper: {run_name} done: wall {summary['wall_s']:.0f} s, final avg@16 "
                      f"{summary['final_avg']:.4f}", file=sys.stderr, flush=True)
            base = base or summary.pop("base", None) or _has_base(work, signature)
            summary.pop("base", None)
            runs.setdefault(name, []).append(summary)
    for rs in runs.values():
        for r in rs:  # every run starts from the same base eval
            if r["curve"] and r["curve"][0]["step"] != 0:
                r["curve"].insert(0, {"step": 0, "samples": 0.0, **_point(base)})
    table = summarize(runs, base, steps, batch)
    table["seeds"] = list(range(seed0, seed0 + seeds))
    table["default_method"] = load_config(DEFAULT_PRESET, overrides).algo.name
    result = {"steps": steps, "batch": batch, "seeds": seeds, "seed0": seed0, "eval_every": eval_every,
              "overrides": overrides, "table": table,
              "curves": {n: [r["curve"] for r in rs] for n, rs in runs.items()}}
    write_result(out_dir, "paper", result)
    (out_dir / "paper_table.json").write_text(json.dumps(table, indent=2))
    plot(result, out_dir)
    return result


def _default_row(overrides: list[str]) -> list[tuple[str, str, dict]]:
    """The method `ada-ray train` uses by default, as an extra row when it is none of the paper's seven."""
    name = load_config(DEFAULT_PRESET, overrides).algo.name
    return [] if name in {m[1] for m in METHODS} else [(name, DEFAULT_PRESET, {})]


def _has_base(work: Path, signature: dict) -> dict | None:
    """The base policy's eval, from whichever finished run of this bench made it."""
    for f in sorted(work.glob("*.json")):
        d = json.loads(f.read_text())
        if d.get("signature") == signature and d.get("base"):
            return d["base"]
    return None


def _point(e: dict) -> dict:
    """avg@k and pass@k of one eval_per_prompt.jsonl record."""
    from ada_ray.evaluate import pass_at_k

    k, c = e["k"], e["correct"]
    return {"avg": sum(c) / (k * len(c)), "pass": sum(pass_at_k(k, x, k) for x in c) / len(c)}


def plot(result: dict, out_dir: Path) -> Path:
    """Mean eval avg@16 over seeds vs training step and vs generated samples, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (name, curves) in enumerate(result["curves"].items()):
        steps = sorted({p["step"] for c in curves for p in c})
        at = [[p for c in curves for p in c if p["step"] == s] for s in steps]
        ys = [statistics.mean(p["avg"] for p in pts) for pts in at]
        xs = [statistics.mean(p["samples"] for p in pts) for pts in at]
        style = {"color": f"C{i}", "label": name, "marker": "o", "ms": 3,
                 "lw": 2.2 if name in ("grpo_n4", "ada_seq_balance") else 1.2}
        axes[0].plot(steps, ys, **style)
        axes[1].plot(xs, ys, **style)
    axes[0].set_xlabel("training step")
    axes[1].set_xlabel("generated samples")
    axes[1].set_xscale("symlog", linthresh=1000)
    return finish_eval_figure(fig, axes, f"embedded task: {result['steps']} steps x {result['batch']} prompts, "
                              f"{result['seeds']} seeds", out_dir / "paper_eval.png")


def format_table(result: dict) -> str:
    t = result["table"]
    lines = [f"base avg@16 {t['base']['avg16']:.3f} on {t['base']['prompts']} held-out prompts; {t['steps']} steps x "
             f"{t['batch']} prompts; seeds {result['seeds']}", "",
             "| method | avg@16 | pass@16 | diff to grpo n=4 (SE seeds / SE prompts) | samples | wall s | zero-signal | "
             "steps to grpo-n4 final | samples to grpo-n4 final |", "| --- " * 9 + "|"]

    def ms(vals, fmt="{:.3f}"):
        m, s = _mean_sd(vals)
        return (fmt + " ± " + fmt).format(m, s) if m == m else "n/a"

    def reached(vals, fmt):
        got = [v for v in vals if v == v]
        return f"{fmt.format(statistics.mean(got))} ({len(got)}/{len(vals)})" if got else f"never (0/{len(vals)})"

    for name, m in t["methods"].items():
        d = m.get("diff_to_grpo_n4")
        diff = f"{d['mean']:+.3f} ({d['se_seeds']:.3f} / {d['se_prompts']:.3f})" if d else "-"
        lines.append(f"| {name} | {ms(m['avg16'])} | {ms(m['pass16'])} | {diff} | {ms(m['samples'], '{:.0f}')} | "
                     f"{ms(m['wall_s'], '{:.0f}')} | {ms(m['zero_signal_share'], '{:.2f}')} | "
                     f"{reached(m['steps_to_grpo_n4_final'], '{:.0f}')} | {reached(m['samples_to_grpo_n4_final'], '{:.0f}')} |")
    bs = [b for b, _, _ in BUCKETS if t["base"]["buckets"][b]["prompts"]]
    lines += ["", "| base pass@16 bucket | prompts | base | " + " | ".join(t["methods"]) + " |",
              "| --- " * (3 + len(t["methods"])) + "|"]
    for b in bs:
        bb = t["base"]["buckets"][b]
        lines.append(f"| {b} | {bb['prompts']} | {bb['avg16']:.3f} | " + " | ".join(
            f"{statistics.mean(m['buckets'][b]):.3f}" for m in t["methods"].values()) + " |")
    return "\n".join(lines)
