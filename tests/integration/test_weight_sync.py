"""Weight sync is real: after training steps and a broadcast, the sampler's vLLM engine assigns a
fixed completion the same log-probs as the learner does for the same weights."""

from __future__ import annotations

import time

import pytest
import ray

from ada_ray.driver import cluster as cl
from ada_ray.config import load_config
from ada_ray.data.datasets import load_splits
from ada_ray.driver.runtime import Runtime
from tests.integration.conftest import tiny_overrides

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("learners,zero_stage", [(1, 0), (2, 3)], ids=["zero0", "zero3_two_learners"])
def test_sampler_logprobs_follow_learner_weights(ray_cluster, model_path, tmp_path, learners, zero_stage):
    """ZeRO-3: the learners gather and broadcast bucket by bucket (a bucket of 1 MB here, so the
    update takes several), and the sampler still ends with exactly the learner's weights."""
    from transformers import AutoTokenizer

    cfg = load_config("grpo", tiny_overrides(tmp_path, **{
        "learner.lr": 3e-3, "trainer.total_steps": 10, "learner.num_learners": learners,
        "learner.zero_stage": zero_stage, "weight_sync.bucket_mb": 1.0 if zero_stage == 3 else 64.0}))
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    rt = Runtime.build(cfg, cl.connect(cfg), model_path, train_set.prompts)
    try:
        p = train_set.prompts[0]
        completion = tok(p.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        row = {"prompt": list(p.token_ids), "completion": completion, "behaviour_logprobs": [],
               "advantage": 0.0, "version": 0}
        before_s = ray.get(rt.samplers[0].logprobs_of.remote(list(p.token_ids), completion))
        before_l = learner_logprobs(rt, row)
        assert before_s == pytest.approx(before_l, abs=1e-4)
        rt.start_sampling()
        for step in range(2):
            cohort = rt.wait_cohort(step, 120)
            rt.train(cohort, step)
            stats = rt.sync_weights(step + 1)
            assert stats["sync/mb"] > 3.0 and stats["sync/seconds"] < 30
            if zero_stage == 3:
                assert stats["sync/mb"] < 5.0  # the full model once (~4 MB), not its partitions or twice
        ray.get(rt.samplers[0].pause_sampling.remote())
        deadline = time.time() + 60
        while ray.get(rt.samplers[0].stats.remote())["inflight_samples"] and time.time() < deadline:
            time.sleep(0.2)
        after_s = ray.get(rt.samplers[0].logprobs_of.remote(list(p.token_ids), completion))
        after_l = learner_logprobs(rt, row)
        assert max(abs(a - b) for a, b in zip(after_s, before_s)) > 1e-3  # the weights moved
        assert after_s == pytest.approx(after_l, abs=1e-4)  # and the sampler has exactly them
        assert ray.get(rt.samplers[0].stats.remote())["version"] == 2
    finally:
        rt.shutdown()


def learner_logprobs(rt, row) -> list:
    """Every learner runs the forward (ZeRO-3 gathers parameters across ranks); rank 0's answer."""
    return ray.get([lrn.logprobs.remote([row]) for lrn in rt.learners])[0][0]
