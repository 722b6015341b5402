"""Integration fixtures: one local Ray cluster (127.0.0.1) for the whole session, the embedded
policy built once, and a check that no stray Ray / vLLM / MLflow process outlives the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ada_ray.config import load_config


def tiny_overrides(tmp_path, **extra) -> list[str]:
    """A few-step run on a small slice of the embedded task."""
    base = {
        "data.train_per_level": 24, "data.eval_per_level": 4, "data.levels": "[2x1,3x1,2x2,3x2]", "trainer.batch_prompts": 6,
        "trainer.total_steps": 3, "trainer.eval_every": 0, "trainer.output_dir": str(tmp_path),
        "trainer.run_name": "run", "sampler.max_num_seqs": 128, "tracking.enabled": "false", "trainer.eval_samples": 8,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server_at(folder):
    """A real `mlflow server` on 127.0.0.1 (sqlite store and artifacts under `folder`); yields its URL
    once /health answers, and stops it (its whole process group) on the way out."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination", str(folder / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail(f"mlflow server on {url} did not come up")
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def model_path():
    from ada_ray.data.warmstart import ensure_embedded_policy

    return str(ensure_embedded_policy(load_config()))


@pytest.fixture(scope="session")
def ray_cluster(model_path):
    import ray

    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}},
             logging_level="WARNING")
    yield ray
    ray.shutdown()


STRAY = "ray::|raylet|gcs_server|mlflow server|mlflow.server"
# every process the tests start inherits this mark in its environment (Ray's daemons and workers, MLflow
# servers, jobs): the stray check counts only those, not another Ray cluster running on the machine
SESSION_MARK = "ADA_RAY_TEST_SESSION"


def _ours(pid: int, mark: str) -> bool:
    import psutil

    try:
        return psutil.Process(pid).environ().get(SESSION_MARK) == mark
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _procs(pattern: str, mark: str) -> dict[int, str]:
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    procs = {}
    for line in out.splitlines():
        pid, _, cmd = line.partition(" ")
        if int(pid) != os.getpid() and _ours(int(pid), mark):
            procs[int(pid)] = cmd[:200]
    return procs


@pytest.fixture(scope="session", autouse=True)
def no_stray_processes():
    """After the integration tests, no Ray, vLLM (inside Ray actors) or MLflow process they started
    may remain (processes without this session's mark, e.g. another Ray cluster, are not ours)."""
    import uuid

    mark = os.environ[SESSION_MARK] = uuid.uuid4().hex
    yield
    deadline = time.time() + 30
    while True:
        left = _procs(STRAY, mark)
        if not left or time.time() > deadline:
            break
        time.sleep(1)
    assert not left, f"stray processes after the tests: {left}"
