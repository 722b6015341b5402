"""ada_ray/driver/restarts.py: which failures a run heals by rebuilding its runtime."""

import ray.exceptions as rex
import torch.distributed as dist

from ada_ray.config import ConfigError
from ada_ray.driver.restarts import what_died
from ada_ray.driver.runtime import RuntimeFailure
from ada_ray.driver.trainer import TrainingError


def test_dead_actors_timeouts_and_broken_collectives_are_healed():
    assert what_died(rex.ActorDiedError()).startswith("an actor died (ActorDiedError")
    assert what_died(RuntimeFailure("queue state did not finish within 300s")) == \
        "a call did not answer (RuntimeFailure: queue state did not finish within 300s)"
    assert what_died(rex.GetTimeoutError("x")).startswith("a call did not answer")
    assert what_died(dist.DistBackendError("NCCL error")).startswith("a collective broke (DistBackendError")
    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4321")
    assert what_died(gloo).startswith("a collective broke (RuntimeError: [gloo")


def test_a_task_error_counts_only_when_its_cause_is_a_collective():
    broken = rex.RayTaskError("bus_send", "tb", dist.DistNetworkError("peer gone"))
    assert what_died(broken).startswith("a collective broke (DistNetworkError: peer gone")
    bug = rex.RayTaskError("train_step", "tb", KeyError("advantage"))
    assert what_died(bug) is None


def test_mistakes_and_bugs_are_not_retried():
    for exc in (ConfigError("trainer.x: unknown key"), TrainingError("5 steps in a row had a non-finite loss"),
                ValueError("a bug"), RuntimeError("some other runtime error"), KeyboardInterrupt()):
        assert what_died(exc) is None, exc


def test_a_task_error_caused_by_a_dead_actor_is_healed():
    # a queue shard died under the coordinator: the driver sees the coordinator's task fail with it
    shard_gone = rex.RayTaskError("wait_cohort", "tb", rex.ActorDiedError())
    assert what_died(shard_gone).startswith("an actor died (ActorDiedError")
