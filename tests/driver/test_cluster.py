"""Placement: the bundles each layout asks for (no cluster needed)."""

import pytest

from ada_ray.driver import cluster as cl
from ada_ray.config import ConfigError, load_config


def test_colocated_bundles_pair_a_sampler_and_a_learner_on_one_gpu():
    cfg = load_config("default", ["weight_sync.colocated=true", "sampler.num_samplers=2", "learner.num_learners=2",
                                  "sampler.num_gpus=0.5", "learner.num_gpus=0.5", "sampler.num_cpus=2",
                                  "learner.num_cpus=3", "trainer.batch_prompts=8"])
    assert cl.colocated_bundles(cfg) == [{"CPU": 5.0, "GPU": 1.0}, {"CPU": 5.0, "GPU": 1.0}]
    cpu = load_config("default", ["weight_sync.colocated=true"])
    assert cl.colocated_bundles(cpu) == [{"CPU": cpu.sampler.num_cpus + cpu.learner.num_cpus}]


@pytest.mark.parametrize("overrides, message", [
    (["sampler.num_samplers=2"], "sampler.num_samplers = 2 must equal learner.num_learners = 1"),
    (["weight_sync.backend=nccl"], "weight_sync.backend"),
    (["sampler.num_gpus=1", "learner.num_gpus=1"], r"sampler.num_gpus \+ learner.num_gpus = 1.0 \+ 1.0 must be <= 1"),
    (["sampler.tensor_parallel_size=2"], "sampler.tensor_parallel_size"),
])
def test_colocated_refuses_impossible_layouts(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("default", ["weight_sync.colocated=true"] + overrides)


def test_resources_check_names_the_shortfall():
    cfg = load_config("default", ["sampler.num_samplers=3", "sampler.num_cpus=4"])
    with pytest.raises(cl.ResourceError, match="it asks for 1[0-9] CPUs"):
        cl.check_resources(cfg, {"CPU": 4.0})
