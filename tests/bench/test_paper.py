"""The paper bench's arithmetic: difficulty buckets, steps-to-reach, paired differences."""

import math

import pytest

from ada_ray.bench.paper import bucket_of, reach, summarize


def test_buckets_follow_the_papers_edges():
    assert bucket_of(0.0) == "0"
    assert bucket_of(1 / 16) == bucket_of(0.1875) == bucket_of(0.2) == "(0,0.2]"
    assert bucket_of(0.25) == bucket_of(0.5) == "(0.2,0.5]"
    assert bucket_of(0.5625) == bucket_of(1.0) == "(0.5,1]"
    with pytest.raises(ValueError):
        bucket_of(1.5)


def test_reach_is_the_first_eval_at_or_above_the_target_after_step_0():
    curve = [{"step": 0, "samples": 0, "avg": 0.5}, {"step": 10, "samples": 400, "avg": 0.3},
             {"step": 20, "samples": 900, "avg": 0.41}, {"step": 30, "samples": 1300, "avg": 0.45}]
    assert reach(curve, 0.4, "step") == 20 and reach(curve, 0.4, "samples") == 900
    assert math.isnan(reach(curve, 0.6, "step"))


def _run(seed, correct, samples=100.0):
    k = 4
    avg = sum(correct) / (k * len(correct))
    return {"seed": seed, "final_avg": avg, "final_pass": avg, "final_correct": correct, "samples": samples,
            "wall_s": 1.0, "zero_signal_share": 0.5, "curve": [{"step": 0, "samples": 0, "avg": 0.25},
                                                               {"step": 5, "samples": samples, "avg": avg}]}


def test_summarize_pairs_by_seed_and_by_prompt():
    base = {"k": 4, "correct": [0, 1, 2, 4]}  # rates 0, .25, .5, 1 -> one prompt per bucket
    runs = {"grpo_n4": [_run(0, [0, 1, 2, 4]), _run(1, [0, 2, 2, 4])],
            "ada_seq_balance": [_run(0, [1, 2, 2, 4], 300.0), _run(1, [1, 2, 3, 4], 300.0)]}
    t = summarize(runs, base, steps=5, batch=2)
    assert t["base"]["avg16"] == pytest.approx(7 / 16)
    assert {b: v["prompts"] for b, v in t["base"]["buckets"].items()} == {"0": 1, "(0,0.2]": 0, "(0.2,0.5]": 2, "(0.5,1]": 1}
    d = t["methods"]["ada_seq_balance"]["diff_to_grpo_n4"]
    # seed 0: 9/16 - 7/16 = 0.125; seed 1: 10/16 - 8/16 = 0.125
    assert d["per_seed"] == pytest.approx([0.125, 0.125]) and d["mean"] == pytest.approx(0.125)
    assert d["se_seeds"] == pytest.approx(0.0)
    # per prompt, seed-averaged differences: [.25, .125, .125, 0] -> SE = sd / 2
    assert d["se_prompts"] == pytest.approx(0.10206207 / 2, rel=1e-6)
    bal = t["methods"]["ada_seq_balance"]
    assert bal["buckets"]["0"] == [0.25, 0.25] and bal["buckets"]["(0.2,0.5]"] == [0.5, 0.625]
    # grpo-n4's final eval (mean of 7/16 and 8/16) is reached at step 5 by every run
    assert bal["steps_to_grpo_n4_final"] == [5.0, 5.0] and bal["samples_to_grpo_n4_final"] == [300.0, 300.0]
    assert "diff_to_grpo_n4" not in t["methods"]["grpo_n4"]
