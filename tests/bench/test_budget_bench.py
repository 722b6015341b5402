"""bench/budget.py's reading of runs (curves at equal steps, wall and samples; per-bucket sample
accounting; paired differences) and bench/levers.py's replay, without training anything."""

import json
import math

import pytest

from ada_ray.bench import budget, levers


def test_at_point_interpolates_and_refuses_to_extrapolate():
    curve = [{"step": 0, "wall_s": 0.0, "samples": 0.0, "avg": 0.1},
             {"step": 50, "wall_s": 20.0, "samples": 1000.0, "avg": 0.2},
             {"step": 100, "wall_s": 40.0, "samples": 2000.0, "avg": 0.4}]
    assert budget.at_point(curve, "wall_s", 30.0) == pytest.approx(0.3)
    assert budget.at_point(curve, "samples", 500.0) == pytest.approx(0.15)
    assert budget.at_point(curve, "step", 100) == pytest.approx(0.4)
    assert math.isnan(budget.at_point(curve, "wall_s", 41.0))


def write_run(d, steps, step_s, samples_per_step, evals, pools):
    d.mkdir(parents=True)
    with open(d / "metrics.jsonl", "w") as fh:
        for s in range(1, steps + 1):
            fh.write(json.dumps({"step": s, "time/step": step_s, "time/wait": 0.1, "time/train": step_s - 0.1,
                                 "time/sync": 0.0, "sampler/busy_s": 0.5, "sampler/idle_s": 0.1, "sampler/tokens": 10.0,
                                 "train/samples_generated": samples_per_step, "train/no_signal_sample_share": 0.25,
                                 "train/samples_generated_total": samples_per_step * s}) + "\n")
    with open(d / "eval_per_prompt.jsonl", "w") as fh:
        for s, correct in evals:
            fh.write(json.dumps({"step": s, "k": 4, "correct": correct}) + "\n")
    with open(d / "trained_prompts.jsonl", "w") as fh:
        for s in range(steps):
            fh.write(json.dumps({"step": s, "prompts": ["easy", "hard"], "pool": pools, "pos": [2, 0],
                                 "fired": [True, False]}) + "\n")


def test_summaries_and_the_paired_table(tmp_path):
    rates = {"easy": 0.5, "hard": 0.0}
    write_run(tmp_path / "g", 4, 1.0, 8, [(0, [0, 0]), (2, [1, 1]), (4, [2, 2])], [4, 4])  # grpo_n4: 4 steps of 1 s
    write_run(tmp_path / "a", 2, 1.5, 20, [(0, [0, 0]), (2, [2, 2])], [8, 12])  # ada: 2 steps of 1.5 s
    g = budget.summarize_run(tmp_path / "g", rates, 4)
    a = budget.summarize_run(tmp_path / "a", rates, 4)
    assert g["wall_s"] == 4.0 and g["samples"] == 32 and a["wall_s"] == 3.0 and a["samples"] == 40
    assert a["buckets"]["0"] == {"samples": 24, "prompts": 2, "no_pair": 2, "capped": 2, "no_pair_samples": 24}
    assert a["buckets"]["(0.2,0.5]"]["no_pair"] == 0 and a["time_split_s"]["sampler_busy"] == 1.0
    t = budget.build_table({"grpo_n4": {1: g}, "ada_budget": {1: a}}, steps=2, batch=2, base={"avg16": 0.0}, default_method="ada_budget")
    assert t["wall_budget_s"] == 3.0 and t["sample_budget"] == 32
    m = t["methods"]["ada_budget"]
    assert m["avg16"] == [0.5] and m["wall_s_per_step"] == [1.5]
    # grpo_n4 at step 2 -> 0.25; at wall 3 s (between its 2 s and 4 s evals) -> 0.375; at 32 samples -> its 0.5
    assert t["methods"]["grpo_n4"]["avg16"] == [0.25]
    assert t["methods"]["grpo_n4"]["avg16_equal_wall"] == [pytest.approx(0.375)]
    v = m["vs_grpo_n4"]
    assert v["equal_steps"]["per_seed"] == [pytest.approx(0.25)]
    assert v["equal_wall"]["per_seed"] == [pytest.approx(0.125)]
    assert v["equal_samples"]["per_seed"] == [pytest.approx(0.5 * 32 / 40 - 0.5)]
    assert v["wall_per_step_ratio"] == 1.5 and v["samples_per_step_ratio"] == 2.5
    assert "ada_budget" in budget.format_table({"table": {**t, "seeds": [1]}})
    # a variant measured beside them: compared like the rest, but its shorter run does not set the budgets
    write_run(tmp_path / "v", 2, 0.5, 10, [(0, [0, 0]), (2, [2, 2])], [4, 6])  # 2 steps of 0.5 s, 20 samples
    short = budget.summarize_run(tmp_path / "v", rates, 4)
    t2 = budget.build_table({"grpo_n4": {1: g}, "ada_budget": {1: a}, "cap": {1: short}}, steps=2, batch=2,
                            base={"avg16": 0.0}, default_method="ada_budget", variants=["cap"])
    assert (t2["wall_budget_s"], t2["sample_budget"]) == (3.0, 32)  # as without the variant
    assert t2["methods"]["cap"]["avg16"] == [0.5] and t2["methods"]["cap"]["vs_grpo_n4"]["equal_steps"]["mean"] == 0.25
    # read with GRPO-n4 at its own budgets: 1 s (its final wall) and 20 samples; GRPO-n4 there: 0.125, 0.3125
    assert t2["methods"]["cap"]["budgets"] == {"wall_s": 1.0, "samples": 20}
    assert t2["methods"]["cap"]["vs_grpo_n4"]["equal_wall"]["per_seed"] == [pytest.approx(0.5 - 0.125)]
    assert t2["methods"]["cap"]["vs_grpo_n4"]["equal_samples"]["per_seed"] == [pytest.approx(0.5 - 0.3125)]
    assert "cap at 1 s and 20 samples" in budget.format_table({"table": {**t2, "seeds": [1]}})


def test_held_out_pass_at_k_before_and_at_the_step(tmp_path):
    write_run(tmp_path / "a", 2, 1.0, 8, [(0, [0, 1, 0, 2]), (2, [0, 0, 3, 4])], [4, 4])
    assert budget.heldout_pass(tmp_path / "a", 2) == {"step0": 0.5, "step2": 0.5}
    assert budget.heldout_pass(tmp_path / "a", 7) == {"step0": 0.5}  # no eval at that step: not made up
    # by the base's bucket: prompts 1 and 3 unsolved at first (one solved at the step), 2 and 4 at 1/4 and 2/4
    # (one kept): coverage 0.5 in both; avg@16 (0 + 3/4) / 2 and (0 + 4/4) / 2
    assert budget.heldout_buckets(tmp_path / "a", 2, coverage=True) == {"0": 0.5, "(0.2,0.5]": 0.5}
    assert budget.heldout_buckets(tmp_path / "a", 2) == {"0": 0.375, "(0.2,0.5]": 0.5}
    g = budget.summarize_run(tmp_path / "a", {"easy": 0.5, "hard": 0.0}, 4)
    a = {**g, "heldout_pass": {"step0": 0.5, "step2": 0.25}}
    g["heldout_pass"] = {"step0": 0.5, "step2": 0.75}
    t = budget.build_table({"grpo_n4": {1: g}, "ada_budget": {1: a}}, steps=2, batch=2, base={"avg16": 0.0},
                           default_method="ada_budget")
    assert t["methods"]["ada_budget"]["pass16"] == [0.25] and t["methods"]["ada_budget"]["pass16_base"] == [0.5]
    assert t["methods"]["ada_budget"]["vs_grpo_n4"]["pass16_equal_steps"]["mean"] == -0.5
    assert "| ada_budget | 0.500 ± 0.000 | 0.250 ± 0.000 | -0.500 (nan) |" in budget.format_table(
        {"table": {**t, "seeds": [1]}})
    # coverage by the base's bucket, beside avg@16 by bucket
    for r, cover in ((g, 0.5), (a, 0.25)):
        r["heldout_buckets"], r["heldout_pass_buckets"] = {"0": 0.1}, {"0": cover}
    t = budget.build_table({"grpo_n4": {1: g}, "ada_budget": {1: a}}, steps=2, batch=2, base={"avg16": 0.0},
                           default_method="ada_budget")
    text = budget.format_table({"table": {**t, "seeds": [1]}})
    assert "| held-out pass@16 at equal steps, by base pass@16 bucket | 0 |" in text
    assert text.index("| ada_budget | 0.250 |") > text.index("held-out pass@16 at equal steps, by base")


def test_variants_are_parsed_or_refused_by_name():
    assert budget.parse_variants("cap8:algo.budget_max_samples=8,lo:algo.park_below=0.1;algo.k_pos=1") == [
        ("cap8", "default", {"algo.budget_max_samples": "8"}),
        ("lo", "default", {"algo.park_below": "0.1", "algo.k_pos": "1"})]
    assert budget.parse_variants("") == []
    for bad in ("cap8", "cap8:", "cap8:algo.x", "8cap:algo.x=1"):
        with pytest.raises(ValueError, match="variants entry"):
            budget.parse_variants(bad)


def test_lever_replay_is_deterministic_and_parking_cuts_no_signal_samples():
    rates = {f"z{i}": 0.0 for i in range(40)} | {f"m{i}": 0.4 for i in range(40)}
    plain = levers.replay(rates, "ada_budget", {"max_rounds": 2, "park_below": 0.0}, 40, 16, 0)
    parked = levers.replay(rates, "ada_budget", {"max_rounds": 2, "park_below": 0.25}, 40, 16, 0)
    assert parked == levers.replay(rates, "ada_budget", {"max_rounds": 2, "park_below": 0.25}, 40, 16, 0)
    assert parked["parked_per_step"] > 0 == plain["parked_per_step"]
    assert parked["no_signal_sample_share"] < plain["no_signal_sample_share"]
    assert parked["usable_share"] > plain["usable_share"]
    # probes: the never-solved prompts come back with 4 samples each instead of being parked
    probed = levers.replay(rates, "ada_budget", {"probe_samples": 4}, 40, 16, 0)
    assert probed["parked_per_step"] < parked["parked_per_step"] / 4
    assert probed["samples_per_prompt"] < plain["samples_per_prompt"]
    grpo = levers.replay(rates, "grpo", {}, 10, 16, 0)
    assert grpo["samples_per_prompt"] == 4.0


def test_cached_runs_are_keyed_by_the_resolved_algo_config():
    sig = {"steps": 3, "batch": 2, "eval_every": 1, "grpo_factor": 1.5, "overrides": []}
    default = budget.run_signature(sig, "default", {})
    # the same config reached two ways is the same run; a setting that differs is not
    assert budget.run_signature(sig, "default", {"algo.budget_max_samples": "12"}) == default
    assert budget.run_signature(sig, "default", {"algo.probe_samples": "4"}) != default
    assert budget.run_signature(sig, "grpo", {"algo.n": "4"})["algo"]["name"] == "grpo"
    assert budget.run_signature({**sig, "overrides": ["algo.settle_target=0.7"]}, "default", {}) != default
