"""Rows of docs/BAD_INPUTS.md that need the running system: NaN/inf loss (17), and a Ray cluster
without the resources the config asks for (19)."""

from __future__ import annotations

import time

import pytest

from ada_ray.driver.cluster import ResourceError
from ada_ray.config import load_config
from ada_ray.driver.trainer import TrainingError, train
from tests.integration.conftest import tiny_overrides

pytestmark = pytest.mark.slow


def test_17_nonfinite_loss_is_skipped_counted_then_stops(ray_cluster, tmp_path):
    cfg = load_config("grpo", tiny_overrides(tmp_path, **{"data.reward": "tests.rewards.plugins:huge",
                                                          "algo.norm_adv_by_std": "false",
                                                          "learner.max_nonfinite_steps": 2,
                                                          "trainer.total_steps": 6}))
    with pytest.raises(TrainingError, match="2 training steps in a row had a NaN/inf loss"):
        train(cfg)


def test_19_cluster_without_resources_fails_fast(ray_cluster, tmp_path):
    cfg = load_config("grpo", tiny_overrides(tmp_path, **{"sampler.num_samplers": 40, "trainer.batch_prompts": 40}))
    t0 = time.time()
    with pytest.raises(ResourceError, match="cannot host this config: it asks for 41 CPUs"):
        train(cfg)
    assert time.time() - t0 < 120
