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


def test_custom_resources_pin_each_role_and_a_cluster_without_them_is_refused():
    cfg = load_config("default", ["sampler.resources={node_a: 1}", "learner.resources={node_b: 0.5}",
                                  "sampler.num_samplers=2"])
    assert cl.custom_resources(cfg) == {"node_a": 2.0, "node_b": 0.5}
    cl.check_resources(cfg, {"CPU": 8.0, "node_a": 2.0, "node_b": 1.0})
    with pytest.raises(cl.ResourceError, match="2 of the custom resource 'node_a' .* but the cluster has 1"):
        cl.check_resources(cfg, {"CPU": 8.0, "node_a": 1.0, "node_b": 1.0})
    both = load_config("default", ["weight_sync.colocated=true", "sampler.resources={pool: 1}",
                                   "learner.resources={pool: 1, fast: 1}"])
    assert cl.colocated_bundles(both) == [{"CPU": 2.0, "pool": 2.0, "fast": 1.0}]


@pytest.mark.parametrize("override, message", [
    ("sampler.resources={CPU: 1}", "custom resources only"),
    ("learner.resources={node_b: 0}", r"'learner.resources.node_b' must be > 0"),
])
def test_bad_custom_resources_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("default", [override])


def test_a_local_cluster_refuses_a_config_the_machine_cannot_host():
    cfg = load_config("default", ["sampler.num_samplers=1000"])
    with pytest.raises(cl.ResourceError) as err:
        cl.check_local_host(cfg, cores=2, memory_gib=23.5)
    msg = str(err.value)
    assert "1001 CPUs (sampler.num_samplers x sampler.num_cpus = 1000 x 1 + learner.num_learners x " \
           "learner.num_cpus = 1 x 1) but this machine has 2 cores" in msg
    assert "trainer.ray_num_cpus=1001" in msg and "1800.5 GiB of memory" in msg and "23.5 GiB" in msg
    cl.check_local_host(load_config("default"), cores=2, memory_gib=23.5)  # the default fits a 2-core machine
    # oversubscribing on purpose: the CPU check is lifted, the memory floor still holds
    cl.check_local_host(load_config("default", ["sampler.num_samplers=3", "trainer.ray_num_cpus=4"]), 2, 23.5)
    with pytest.raises(cl.ResourceError, match="GiB of memory"):
        cl.check_local_host(load_config("default", ["sampler.num_samplers=30", "trainer.ray_num_cpus=31"]), 2, 23.5)


def test_train_refuses_an_unhostable_config_before_anything_starts(tmp_path, monkeypatch):
    import ray

    from ada_ray.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray must not start"))
    rc = main(["train", "default", "sampler.num_samplers=1000", f"trainer.output_dir={tmp_path}", "tracking.enabled=false"])
    assert rc == 2 and not any(tmp_path.iterdir())  # nothing written either
