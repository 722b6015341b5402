"""bench algo's summary: samples to reach grpo-n4's final training reward, and when it is undefined."""

import math

from ada_ray.bench.algos import summarize


def _run(samples, rewards):
    return {"samples": samples, "reward": rewards, "seconds": list(range(len(samples))), "final_reward": rewards[-1],
            "eval": {}, "zero_signal_share": 0.5, "steps": len(samples), "wall_s": float(len(samples))}


def test_samples_to_reach_when_grpo_n4_learns():
    runs = {"grpo_n4": [_run([100, 200, 300, 400], [0.10, 0.15, 0.20, 0.30])],
            "ada": [_run([150, 300, 450, 600], [0.10, 0.30, 0.35, 0.40])]}
    s = summarize(runs)
    assert s["grpo_n4_learned"] and s["target_reward"] == 0.30
    assert s["summary"]["grpo_n4"]["samples_to_grpo_n4_final"]["mean"] == 400
    assert s["summary"]["ada"]["samples_to_grpo_n4_final"]["mean"] == 300
    assert s["summary"]["ada"]["samples_ratio_to_grpo_n4"] == 0.75


def test_no_ratio_when_grpo_n4_does_not_learn():
    """A flat grpo-n4 would be 'reached' by every method at its first step: the ratio would only
    restate samples per step, so it is not reported."""
    runs = {"grpo_n4": [_run([100, 200, 300], [0.27, 0.26, 0.28])],
            "ada": [_run([300, 600, 900], [0.29, 0.28, 0.30])]}
    s = summarize(runs)
    assert not s["grpo_n4_learned"]
    assert math.isnan(s["summary"]["ada"]["samples_ratio_to_grpo_n4"])
    assert s["summary"]["ada"]["samples_to_grpo_n4_final"]["n"] == 0
