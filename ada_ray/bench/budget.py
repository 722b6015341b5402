"""`ada-ray bench budget`: the equal-budget table - each method against GRPO-n4 at equal training
steps, equal wall-clock and equal generated samples - and where every method's samples and time go.

Runs, interleaved so that machine noise hits every method alike (for each seed, every method in turn;
seeds fixed up front, `seed0`, `seed0 + 1`, ...): grpo_n4 trained for `grpo_factor` x `steps` (its eval
curve is read at the other methods' wall time and samples), the default Ada method (the one
`ada-ray train` runs: conf/default.yaml), ada_seq_balance as the paper defines it, and grpo_n16 on the
first `n16_seeds` seeds (the slowest run; last in each seed's turn); `sb_seeds` likewise limits
ada_seq_balance when it is not the default (the reference methods cost 2-3x a default run). `variants`
(`name:config.key=value;...,name2:...`) adds settings of the default method, each run right after the
default in every seed's turn and compared with GRPO-n4 like the rest (the common budgets stay the
table's methods'). Each run's summary is written to
<out>/budget_runs/<method>_s<seed>.json as it ends: a cut bench run again resumes where it stopped.

Per run (from its metrics.jsonl, trained_prompts.jsonl and eval_per_prompt.jsonl):
- train wall: the sum of step times (waiting for a cohort + training + weight sync; start-up and evals
  excluded) and its split: driver waiting, learner busy, sampler busy and idle (engine seconds);
- generated samples and tokens, the share of samples spent on prompts that ended with no signal;
- per bucket of the base policy's pass@16 on each *training* prompt (measured once a bench, in a
  child process): samples drawn, prompts, the share of prompts that ended without a usable pair
  (all rewards equal), the share that ended at the round cap, and the samples spent on no-pair prompts;
- the eval curve: (step, train wall, generated samples, avg@16) every `eval_every` steps;
- held-out pass@16 before training and at `steps` (read from eval_per_prompt.jsonl when the table is
  made): coverage, beside avg@16's mean.

The table (`paper_budget_table.json`): per method and seed, avg16 at `steps`, avg16_equal_wall at the
common wall time W (the shortest final train wall of any run: every curve reaches it), avg16_equal_samples
at the common sample count S (likewise), wall_s_per_step and samples; each method minus grpo_n4 paired by
seed (mean, SE over seeds) at the three budgets (grpo_n4's equal-steps point is its step-`steps` eval).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Collection, Optional

from ada_ray.bench.common import finish_eval_figure, write_result
from ada_ray.bench.paper import BUCKETS, _mean_sd, bucket_of

DEFAULT_PRESET = "default"  # the method `ada-ray train` uses: conf/default.yaml


def methods(default_name: str) -> list[tuple[str, str, dict]]:
    """(name, preset, overrides) in each seed's turn; grpo_n16 last (the slowest, on the first seeds only)."""
    out = [("grpo_n4", "grpo", {"algo.n": 4}), (default_name, DEFAULT_PRESET, {})]
    if default_name != "ada_seq_balance":
        out.append(("ada_seq_balance", "ada_seq_balance", {}))
    out.append(("grpo_n16", "grpo", {"algo.n": 16}))
    return out


def parse_variants(spec: str) -> list[tuple[str, str, dict]]:
    """`variants=name:key=value;key=value,name2:...` -> (name, the default preset, overrides): settings of
    the default method measured beside it (each runs right after the default in every seed's turn)."""
    out = []
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        name, sep, body = part.partition(":")
        pairs = [kv.partition("=") for kv in body.split(";") if kv.strip()]
        if not sep or not name.isidentifier() or not pairs or any(not k.strip() or not eq for k, eq, _ in pairs):
            raise ValueError(f"bench budget: variants entry {part!r}: expected name:config.key=value[;key=value...]")
        out.append((name, DEFAULT_PRESET, {k.strip(): v.strip() for k, _, v in pairs}))
    return out


def _dotlist(settings: dict) -> list[str]:
    return [f"{k}={v}" for k, v in settings.items()]


def run_signature(signature: dict, preset: str, extra: dict) -> dict:
    """What a cached run summary must match to be reused: the bench's settings and the method's whole
    resolved `algo` config (so a changed default, or a preset edited since, is run again, not reused)."""
    from ada_ray.config import load_config, to_dict

    algo = to_dict(load_config(preset, [*_dotlist(extra), *signature["overrides"]]))["algo"]
    return {**signature, "algo": algo}


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def summarize_run(run_dir: Path, base_rate: dict[str, float], k: int) -> dict:
    """One finished run's curve, time split, samples and per-bucket sample accounting."""
    rows = [r for r in _rows(run_dir / "metrics.jsonl") if "time/step" in r]
    rows.sort(key=lambda r: r["step"])
    wall, samples, at = 0.0, 0.0, {0: (0.0, 0.0)}
    split = dict.fromkeys(("wait", "train", "sync", "sampler_busy", "sampler_idle"), 0.0)
    tokens = nosig = 0.0
    for r in rows:
        wall += r["time/step"]
        samples = r["train/samples_generated_total"]
        at[r["step"]] = (wall, samples)
        split["wait"] += r.get("time/wait", 0.0)
        split["train"] += r.get("time/train", 0.0)
        split["sync"] += r.get("time/sync", 0.0)
        split["sampler_busy"] += r.get("sampler/busy_s", 0.0)
        split["sampler_idle"] += r.get("sampler/idle_s", 0.0)
        tokens += r.get("sampler/tokens", 0.0)
        nosig += r.get("train/no_signal_sample_share", 0.0) * r["train/samples_generated"]
    curve = []
    for e in _rows(run_dir / "eval_per_prompt.jsonl"):
        w, s = at.get(e["step"], (float("nan"), float("nan")))
        curve.append({"step": e["step"], "wall_s": w, "samples": s, "avg": sum(e["correct"]) / (e["k"] * len(e["correct"]))})
    buckets = {b: {"samples": 0, "prompts": 0, "no_pair": 0, "capped": 0, "no_pair_samples": 0} for b, _, _ in BUCKETS}
    for t in _rows(run_dir / "trained_prompts.jsonl"):
        for pid, pool, pos, fired in zip(t["prompts"], t.get("pool", []), t.get("pos", []), t.get("fired", [])):
            if pid not in base_rate:
                continue
            b = buckets[bucket_of(base_rate[pid])]
            b["samples"] += pool
            b["prompts"] += 1
            b["capped"] += 0 if fired else 1
            if pos == 0 or pos == pool:
                b["no_pair"] += 1
                b["no_pair_samples"] += pool
    return {"curve": curve, "steps": len(rows), "wall_s": wall, "samples": samples, "tokens": tokens,
            "time_split_s": split, "no_signal_sample_share": nosig / samples if samples else float("nan"),
            "skipped": sum(r.get("train/prompts_skipped", 0.0) for r in rows), "buckets": buckets}


def heldout_pass(run_dir: Path, steps: int) -> dict[str, float]:
    """Held-out pass@k (the share of prompts with at least one right answer among k) before training and
    at step `steps`: whether a method's avg@16 gain comes with wider or narrower coverage."""
    evals = {e["step"]: e for e in _rows(run_dir / "eval_per_prompt.jsonl")}
    return {f"step{st}": statistics.mean(1.0 if c > 0 else 0.0 for c in evals[st]["correct"])
            for st in (0, steps) if st in evals}


def heldout_buckets(run_dir: Path, steps: int, coverage: bool = False) -> dict[str, float]:
    """Held-out avg@16 (or, `coverage`, pass@16) at step `steps` per bucket of the base policy's pass@16 on
    each held-out prompt (the run's step-0 eval): where on the difficulty scale a method's gain sits, and
    where it wins or loses coverage (base bucket 0: prompts it newly solves; the rest: prompts it keeps)."""
    evals = {e["step"]: e for e in _rows(run_dir / "eval_per_prompt.jsonl")}
    if 0 not in evals or steps not in evals:
        return {}
    base, fin = evals[0], evals[steps]
    out: dict[str, list[float]] = {}
    for c0, c in zip(base["correct"], fin["correct"]):
        out.setdefault(bucket_of(c0 / base["k"]), []).append(float(c > 0) if coverage else c / fin["k"])
    return {b: statistics.mean(v) for b, v in out.items()}


def at_point(curve: list[dict], key: str, x: float) -> float:
    """avg@16 read off a curve at `key` (wall_s, samples or step) = x, linear between eval points;
    nan when the curve does not reach x."""
    pts = sorted((p[key], p["avg"]) for p in curve if p[key] == p[key])
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1] if pts and math.isclose(pts[-1][0], x, rel_tol=1e-9) else float("nan")


def _diff(a: list[float], b: list[float]) -> dict:
    d = [x - y for x, y in zip(a, b) if x == x and y == y]
    mean, sd = _mean_sd(d)
    return {"mean": mean, "se": sd / math.sqrt(len(d)) if len(d) > 1 else float("nan"), "per_seed": d}


def build_table(runs: dict[str, dict[int, dict]], steps: int, batch: int, base: dict, default_method: str,
                variants: Collection[str] = ()) -> dict:
    """The equal-budget table from every run's summary (method -> seed -> summary). The common wall and
    sample budgets come from the table's methods, not from `variants` (measured beside them): a variant
    is read, and compared with GRPO-n4, at budgets of its own - the least of its and GRPO-n4's final
    walls and samples (`budgets` in its row)."""
    def common(names) -> tuple[float, float]:
        finals = [r for n in names for r in runs.get(n, {}).values()]
        return min(r["curve"][-1]["wall_s"] for r in finals), min(r["curve"][-1]["samples"] for r in finals)

    wall_budget, sample_budget = common([n for n in runs if n not in variants])
    table = {"default_method": default_method, "steps": steps, "batch": batch, "base": base,
             "wall_budget_s": wall_budget, "sample_budget": sample_budget, "methods": {}}
    own = {v: common([v, "grpo_n4"]) for v in variants if v in runs}
    for name, rs in runs.items():
        seeds = sorted(rs)
        wall_at, samples_at = own.get(name, (wall_budget, sample_budget))
        m = {"seeds": seeds,
             "avg16": [at_point(rs[s]["curve"], "step", steps) for s in seeds],
             "avg16_equal_wall": [at_point(rs[s]["curve"], "wall_s", wall_at) for s in seeds],
             "avg16_equal_samples": [at_point(rs[s]["curve"], "samples", samples_at) for s in seeds],
             "wall_s_per_step": [rs[s]["wall_s"] / rs[s]["steps"] for s in seeds],
             "samples": [at_point_samples(rs[s], steps) for s in seeds],
             "samples_per_step": [rs[s]["samples"] / rs[s]["steps"] for s in seeds],
             "tokens_per_step": [rs[s]["tokens"] / rs[s]["steps"] for s in seeds],
             "no_signal_sample_share": [rs[s]["no_signal_sample_share"] for s in seeds],
             "time_split_s_per_step": {k: statistics.mean(rs[s]["time_split_s"][k] / rs[s]["steps"] for s in seeds)
                                       for k in rs[seeds[0]]["time_split_s"]},
             "buckets": _bucket_means(rs, seeds),
             "heldout_buckets": {b: statistics.mean(rs[s]["heldout_buckets"][b] for s in seeds)
                                 for b in rs[seeds[0]].get("heldout_buckets", {})},
             "heldout_pass_buckets": {b: statistics.mean(rs[s]["heldout_pass_buckets"][b] for s in seeds)
                                      for b in rs[seeds[0]].get("heldout_pass_buckets", {})},
             "trained_steps": [rs[s]["steps"] for s in seeds],
             "pass16": [rs[s].get("heldout_pass", {}).get(f"step{steps}", float("nan")) for s in seeds],
             "pass16_base": [rs[s].get("heldout_pass", {}).get("step0", float("nan")) for s in seeds]}
        if name in own:
            m["budgets"] = {"wall_s": wall_at, "samples": samples_at}
        table["methods"][name] = m
    g = table["methods"].get("grpo_n4")
    for name, m in table["methods"].items():
        if name == "grpo_n4" or g is None:
            continue
        both = [s for s in m["seeds"] if s in g["seeds"]]
        pick = lambda mm, key: [mm[key][mm["seeds"].index(s)] for s in both]  # noqa: E731
        g_wall, g_samples = pick(g, "avg16_equal_wall"), pick(g, "avg16_equal_samples")
        if "budgets" in m:  # a variant: GRPO-n4 read at the variant's own budgets
            g_runs = runs["grpo_n4"]
            g_wall = [at_point(g_runs[s]["curve"], "wall_s", m["budgets"]["wall_s"]) for s in both]
            g_samples = [at_point(g_runs[s]["curve"], "samples", m["budgets"]["samples"]) for s in both]
        m["vs_grpo_n4"] = {
            "seeds": both,
            "equal_steps": _diff(pick(m, "avg16"), pick(g, "avg16")),
            "equal_wall": _diff(pick(m, "avg16_equal_wall"), g_wall),
            "equal_samples": _diff(pick(m, "avg16_equal_samples"), g_samples),
            "pass16_equal_steps": _diff(pick(m, "pass16"), pick(g, "pass16")),
            "wall_per_step_ratio": statistics.mean(a / b for a, b in zip(pick(m, "wall_s_per_step"), pick(g, "wall_s_per_step"))),
            "samples_per_step_ratio": statistics.mean(a / b for a, b in zip(pick(m, "samples_per_step"), pick(g, "samples_per_step"))),
        }
    return table


def at_point_samples(run: dict, steps: int) -> float:
    """Generated samples when the run had trained `steps` steps (grpo_n4 trains longer)."""
    for p in run["curve"]:
        if p["step"] == steps:
            return p["samples"]
    return run["samples"]


def _bucket_means(rs: dict[int, dict], seeds: list[int]) -> dict:
    out = {}
    for b, _, _ in BUCKETS:
        tot = {k: sum(rs[s]["buckets"][b][k] for s in seeds) for k in rs[seeds[0]]["buckets"][b]}
        steps = sum(rs[s]["steps"] for s in seeds)
        if tot["prompts"]:
            out[b] = {"samples_per_step": tot["samples"] / steps, "samples_per_prompt": tot["samples"] / tot["prompts"],
                      "prompts_per_step": tot["prompts"] / steps, "no_pair_share": tot["no_pair"] / tot["prompts"],
                      "capped_share": tot["capped"] / tot["prompts"],
                      "no_pair_sample_share": tot["no_pair_samples"] / tot["samples"] if tot["samples"] else 0.0}
    return out


def rates_path(work: Path, data_overrides: list[str]) -> Path:
    """Where the base pass rates for these data settings are cached (one file per setting)."""
    if not data_overrides:
        return work / "base_train_rates.json"
    import hashlib

    return work / f"base_train_rates_{hashlib.sha1(json.dumps(data_overrides).encode()).hexdigest()[:10]}.json"


def base_train_rates(overrides: list[str], out: Path, k: int = 16) -> dict:
    """The base policy's pass@k on every training prompt, in a child process (its vLLM engine must not
    live in this one while the runs use Ray); cached in `out`."""
    if not out.is_file():
        code = ("import sys, json; from ada_ray.bench.budget import _base_rates_child; "
                "_base_rates_child(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))")
        subprocess.run([sys.executable, "-c", code, json.dumps(overrides), str(out), str(k)], check=True)
    return json.loads(out.read_text())


def _base_rates_child(overrides: list[str], out: str, k: int) -> None:
    from ada_ray.cli import _engine_and_prompts
    from ada_ray.config import load_config
    from ada_ray.evaluate import evaluate_engine

    cfg = load_config(DEFAULT_PRESET, overrides)
    _, engine, prompts, scorer = _engine_and_prompts(cfg, "train")
    res = evaluate_engine(engine, prompts, k, cfg.trainer.eval_temperature, cfg.trainer.seed, scorer)
    scorer.close()
    Path(out).write_text(json.dumps({"k": k, "ids": [p.prompt_id for p in prompts], "correct": res.correct}))


def run(steps: int = 300, batch: int = 64, seeds: int = 5, seed0: int = 11, eval_every: int = 50,
        grpo_factor: float = 1.5, n16_seeds: int = 3, sb_seeds: Optional[int] = None, out_dir: Path = Path("results"),
        smoke: bool = False, overrides: Optional[list[str]] = None, variants: str = "") -> dict:
    from ada_ray.config import load_config
    from ada_ray.driver.trainer import train

    overrides = list(overrides or [])
    if smoke:
        steps, seeds, eval_every, batch, n16_seeds = 4, 1, 2, min(batch, 6), 1
        overrides = ["data.train_per_level=24", "data.eval_per_level=8", "sampler.max_num_seqs=128", *overrides]
    default_name = load_config(DEFAULT_PRESET, overrides).algo.name
    work = out_dir / "budget_runs"
    work.mkdir(parents=True, exist_ok=True)
    data_ov = [o for o in overrides if (o.startswith("data.") or o.startswith("model.")) and "eval_per_level" not in o]
    rates = base_train_rates(data_ov, rates_path(work, data_ov))
    base_rate = {i: c / rates["k"] for i, c in zip(rates["ids"], rates["correct"])}
    signature = {"steps": steps, "batch": batch, "eval_every": eval_every, "grpo_factor": grpo_factor, "overrides": overrides}
    extra_methods = parse_variants(variants)
    clash = {n for n, _, _ in extra_methods} & {n for n, _, _ in methods(default_name)}
    if clash:
        raise ValueError(f"bench budget: variants {sorted(clash)} are named like a method of the table")
    turn = methods(default_name)
    turn[2:2] = extra_methods  # right after the default
    runs: dict[str, dict[int, dict]] = {}
    for i, seed in enumerate(range(seed0, seed0 + seeds)):
        for name, preset, extra in turn:
            if (name == "grpo_n16" and i >= n16_seeds) or (name == "ada_seq_balance" and sb_seeds is not None
                                                             and i >= sb_seeds and name != default_name):
                continue
            n_steps = int(round(steps * grpo_factor)) if name == "grpo_n4" else steps
            summary_path = work / f"{name}_s{seed}.json"
            sig = run_signature(signature, preset, extra)
            if summary_path.is_file() and json.loads(summary_path.read_text()).get("signature") == sig:
                runs.setdefault(name, {})[seed] = json.loads(summary_path.read_text())
                continue
            run_name = f"{name}_s{seed}"
            ov = [f"trainer.total_steps={n_steps}", f"trainer.batch_prompts={batch}", f"trainer.eval_every={eval_every}",
                  "trainer.eval_at_start=true", "trainer.final_eval=true", "trainer.eval_samples=16",
                  "trainer.total_samples=null", f"trainer.output_dir={work / 'runs'}", f"trainer.run_name={run_name}",
                  f"trainer.seed={seed}", "tracking.enabled=false", "trainer.progress=plain", "trainer.save_every=0",
                  *_dotlist(extra), *overrides]
            train(load_config(preset, ov), log=lambda s: None)
            summary = {"signature": sig, "method": name, "seed": seed,
                       **summarize_run(work / "runs" / run_name, base_rate, rates["k"])}
            summary_path.write_text(json.dumps(summary))
            runs.setdefault(name, {})[seed] = summary
            print(f"bench budget: {run_name} done: wall {summary['wall_s']:.0f} s, "
                  f"final avg@16 {summary['curve'][-1]['avg']:.4f}", file=sys.stderr, flush=True)
    for name, rs in runs.items():
        for seed, r in rs.items():
            r["heldout_buckets"] = heldout_buckets(work / "runs" / f"{name}_s{seed}", steps)
            r["heldout_pass_buckets"] = heldout_buckets(work / "runs" / f"{name}_s{seed}", steps, coverage=True)
            r["heldout_pass"] = heldout_pass(work / "runs" / f"{name}_s{seed}", steps)
    base_curve = next(iter(next(iter(runs.values())).values()))["curve"][0]
    base = {"avg16": base_curve["avg"], "train_prompts": len(base_rate),
            "train_buckets": {b: sum(1 for r in base_rate.values() if bucket_of(r) == b) for b, _, _ in BUCKETS}}
    table = build_table(runs, steps, batch, base, default_name, variants=[n for n, _, _ in extra_methods])
    if extra_methods:
        table["variants"] = {n: ov for n, _, ov in extra_methods}
    table["seeds"] = list(range(seed0, seed0 + seeds))
    result = {"steps": steps, "batch": batch, "seeds": table["seeds"], "eval_every": eval_every,
              "grpo_factor": grpo_factor, "overrides": overrides, "table": table,
              "curves": {n: {s: r["curve"] for s, r in rs.items()} for n, rs in runs.items()}}
    write_result(out_dir, "budget", result)
    (out_dir / "paper_budget_table.json").write_text(json.dumps(table, indent=2))
    plot(result, out_dir)
    return result


def plot(result: dict, out_dir: Path) -> Path:
    """Mean avg@16 over seeds vs train wall time and vs generated samples, a line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (name, by_seed) in enumerate(result["curves"].items()):
        curves = list(by_seed.values())
        steps = sorted({p["step"] for c in curves for p in c})
        at = [[p for c in curves for p in c if p["step"] == s] for s in steps]
        ys = [statistics.mean(p["avg"] for p in pts) for pts in at]
        style = {"color": f"C{i}", "label": f"{name} ({len(curves)} seeds)", "marker": "o", "ms": 3}
        axes[0].plot([statistics.mean(p["wall_s"] for p in pts) for pts in at], ys, **style)
        axes[1].plot([statistics.mean(p["samples"] for p in pts) for pts in at], ys, **style)
    t = result["table"]
    axes[0].axvline(t["wall_budget_s"], color="grey", ls="--", lw=1, label="common wall budget")
    axes[1].axvline(t["sample_budget"], color="grey", ls="--", lw=1, label="common sample budget")
    axes[0].set_xlabel("train wall time, s (step times; start-up and evals excluded)")
    axes[1].set_xlabel("generated samples")
    return finish_eval_figure(fig, axes, f"equal budgets: {result['steps']} steps x {result['batch']} prompts "
                              f"(grpo_n4: x{result['grpo_factor']}), seeds {result['seeds']}", out_dir / "paper_budget.png")


def format_table(result: dict) -> str:
    t = result["table"]
    lines = [f"base avg@16 {t['base']['avg16']:.3f}; {t['steps']} steps x {t['batch']} prompts; seeds {t['seeds']}; "
             f"common wall {t['wall_budget_s']:.0f} s, common samples {t['sample_budget']:.0f}; default method "
             f"{t['default_method']}", "",
             "| method | seeds | avg@16 at equal steps | - grpo_n4 (SE) | at equal wall | - grpo_n4 (SE) | at equal samples "
             "| - grpo_n4 (SE) | wall s/step | samples/step | wall ratio | samples ratio | no-signal samples |",
             "| --- " * 13 + "|"]

    def ms(vals):
        m, s = _mean_sd(vals)
        return f"{m:.3f} ± {s:.3f}" if m == m else "n/a"

    def dd(v, key):
        d = v.get("vs_grpo_n4", {}).get(key)
        return f"{d['mean']:+.3f} ({d['se']:.3f})" if d and d["mean"] == d["mean"] else "-"

    for name, m in t["methods"].items():
        v = m.get("vs_grpo_n4", {})
        lines.append(f"| {name} | {len(m['seeds'])} | {ms(m['avg16'])} | {dd(m, 'equal_steps')} | "
                     f"{ms(m['avg16_equal_wall'])} | {dd(m, 'equal_wall')} | {ms(m['avg16_equal_samples'])} | "
                     f"{dd(m, 'equal_samples')} | {statistics.mean(m['wall_s_per_step']):.3f} | "
                     f"{statistics.mean(m['samples_per_step']):.0f} | {v.get('wall_per_step_ratio', 1.0):.2f} | "
                     f"{v.get('samples_per_step_ratio', 1.0):.2f} | {statistics.mean(m['no_signal_sample_share']):.2f} |")
    own = [f"{name} at {m['budgets']['wall_s']:.0f} s and {m['budgets']['samples']:.0f} samples"
           for name, m in t["methods"].items() if "budgets" in m]
    if own:
        lines += ["", "Variants are read, with GRPO-n4, at budgets of their own (the least of their and GRPO-n4's "
                  "final walls and samples): " + "; ".join(own) + "."]
    lines += ["", "| method | held-out pass@16 before | at equal steps | - grpo_n4 (SE) |", "| --- " * 4 + "|"]
    for name, m in t["methods"].items():
        lines.append(f"| {name} | {ms(m.get('pass16_base', []))} | {ms(m.get('pass16', []))} | "
                     f"{dd(m, 'pass16_equal_steps')} |")
    lines += ["", "| method | s/step: driver wait | learner train | weight sync | sampler busy | sampler idle |",
              "| --- " * 6 + "|"]
    for name, m in t["methods"].items():
        ts = m["time_split_s_per_step"]
        lines.append(f"| {name} | {ts['wait']:.3f} | {ts['train']:.3f} | {ts['sync']:.3f} | {ts['sampler_busy']:.3f} | "
                     f"{ts['sampler_idle']:.3f} |")
    hb = [b for b, _, _ in BUCKETS if any(b in m.get("heldout_buckets", {}) for m in t["methods"].values())]
    for key, what in (("heldout_buckets", "avg@16"), ("heldout_pass_buckets", "pass@16")) if hb else ():
        lines += ["", f"| held-out {what} at equal steps, by base pass@16 bucket | " + " | ".join(hb) + " |",
                  "| --- " * (1 + len(hb)) + "|"]
        for name, m in t["methods"].items():
            got = m.get(key, {})
            lines.append(f"| {name} | " + " | ".join(f"{got[b]:.3f}" if b in got else "-" for b in hb) + " |")
    lines += ["", "| method | base pass@16 bucket | prompts/step | samples/prompt | samples/step | no-pair share | "
              "round-cap share | samples on no-pair prompts |", "| --- " * 8 + "|"]
    for name, m in t["methods"].items():
        for b, x in m["buckets"].items():
            lines.append(f"| {name} | {b} | {x['prompts_per_step']:.1f} | {x['samples_per_prompt']:.1f} | "
                         f"{x['samples_per_step']:.0f} | {x['no_pair_share']:.2f} | {x['capped_share']:.2f} | "
                         f"{x['no_pair_sample_share']:.2f} |")
    return "\n".join(lines)
