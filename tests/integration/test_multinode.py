"""A multi-node Ray cluster simulated on one machine (ray.cluster_utils.Cluster: a head for the driver,
node A offering the custom resource node_a for the samplers, node B offering node_b for the learners;
every server on 127.0.0.1) and checkpoints to a file:// storage URI, as to an object store: train with
save_every, SIGKILL the driver after a checkpoint, resume from the URI with another staging folder
(as a driver on another node would), finish. Every step is trained once and no prompt twice, the work
accounting holds, and the run's files, its MLflow store and the final policy are at the URI. The
cluster is stopped afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.conftest import free_port, tiny_overrides
from tests.integration.test_ray_job import stop_cluster

pytestmark = pytest.mark.slow

STEPS = 6


@pytest.fixture
def three_nodes(monkeypatch):
    """(cluster, node A, node B, env for drivers): a head without CPUs and two 2-CPU nodes, in a Ray
    temp dir of their own (its ray_current_cluster file too, so no other test's ray.init finds it)."""
    from ray.cluster_utils import Cluster

    ray_tmp = tempfile.mkdtemp(prefix="rm", dir="/tmp")  # short: Ray's socket paths have a length limit
    os.makedirs(f"{ray_tmp}/ray")
    env = {"RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False, "temp_dir": f"{ray_tmp}/ray",
        "dashboard_agent_listen_port": free_port()})
    try:
        node_a = cluster.add_node(num_cpus=2, resources={"node_a": 1}, node_ip_address="127.0.0.1")
        node_b = cluster.add_node(num_cpus=2, resources={"node_b": 1}, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        yield cluster, node_a, node_b, dict(os.environ, **env)
    finally:
        cluster.shutdown()
        stop_cluster(ray_tmp)


def driver(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ada_ray", "train", "grpo", *args], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def latest_step(run_store: Path) -> int:
    try:
        return int(json.loads((run_store / "checkpoints" / "latest").read_text())["step"])
    except (OSError, ValueError):
        return 0


def placement(cluster) -> dict[str, set[str]]:
    """Actor class -> the node ids its live actors run on."""
    out: dict[str, set[str]] = {}
    for info in cluster.global_state.actor_table(None).values():
        if info["State"] == "ALIVE":
            out.setdefault(info["ActorClassName"], set()).add(info["Address"]["NodeID"])
    return out


def test_checkpoints_at_a_storage_uri_survive_a_killed_driver(three_nodes, model_path, tmp_path):
    cluster, node_a, node_b, env = three_nodes
    store = tmp_path / "store"
    base = tiny_overrides(tmp_path, **{
        "trainer.output_dir": f"file://{store}", "trainer.total_steps": STEPS, "trainer.save_every": 2,
        "trainer.total_epochs": 1, "trainer.ray_address": cluster.address, "trainer.progress": "plain",
        "sampler.resources": "{node_a: 1}", "learner.resources": "{node_b: 1}", "tracking.enabled": "true"})
    run_store = store / "run"

    first = driver(base + [f"trainer.staging_dir={tmp_path / 'stage1'}"], env, tmp_path / "first.log")
    placed: dict[str, set[str]] = {}
    try:
        deadline = time.time() + 900
        while latest_step(run_store) < 2 and first.poll() is None and time.time() < deadline:
            placed = placement(cluster) or placed
            time.sleep(0.5)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]  # killed mid-run, not finished
        placed = placement(cluster)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver dies; Ray ends its actors
        first.wait()
    killed_at = latest_step(run_store)
    assert 2 <= killed_at < STEPS and not (run_store / "final").exists()
    assert placed["Learner"] == {node_b.node_id} and placed["Sampler"] == {node_a.node_id}, placed
    assert placed["PromptQueue"] == {cluster.head_node.node_id}, placed  # beside the driver and its prompt table

    second = driver(base + ["trainer.resume=auto", f"trainer.staging_dir={tmp_path / 'stage2'}"], env,
                    tmp_path / "second.log")
    try:
        rc = second.wait(timeout=900)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    log = (tmp_path / "second.log").read_text()
    assert rc == 0, log[-3000:]
    assert f"resumed from file://{run_store}/checkpoints/step_{killed_at} at step {killed_at}" in log

    # everything below is read from the storage location, not from either driver's staging folder
    trained = [json.loads(x) for x in (run_store / "trained_prompts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trained] == list(range(STEPS))  # every step once: the redone ones were dropped
    prompts = [p for r in trained for p in r["prompts"]]
    assert len(prompts) == len(set(prompts))  # one epoch: no prompt twice
    acct = json.loads((run_store / "accounting.json").read_text())
    assert acct["items_ok"] and acct["prompts_ok"], acct
    assert json.loads((run_store / "checkpoints" / "latest").read_text())["path"] == f"step_{STEPS}"
    assert (run_store / "checkpoints" / f"step_{STEPS}" / "COMPLETE").is_file()
    assert (run_store / "final" / "model.safetensors").is_file()
    assert json.loads((run_store / "final" / "ada_ray.json").read_text()) == {"step": STEPS}
    metric_steps = [json.loads(x)["step"] for x in (run_store / "metrics.jsonl").read_text().splitlines()]
    assert sorted(set(s for s in metric_steps if s > 0)) == list(range(1, STEPS + 1))
    assert not [p for p in (tmp_path / "stage2").iterdir() if p.name.startswith(("up-", "down-"))]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_store / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ada_ray").experiment_id])
    assert run.info.status == "FINISHED"  # one MLflow run across the kill, attached to again from the URI's store
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/round0_reward")] == \
        list(range(1, STEPS + 1))
    print(f"multinode: killed after step_{killed_at}, resumed from the URI, {STEPS} steps")
