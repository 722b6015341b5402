"""`ray job submit` for real: a Ray head on 127.0.0.1, a short training job through the job API,
SUCCEEDED, and its MLflow run in the run directory. The head is stopped afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def submit(client, out: Path) -> str:
    env_vars = {"HF_HUB_OFFLINE": "1"}
    if os.environ.get("ADA_RAY_CACHE"):
        env_vars["ADA_RAY_CACHE"] = os.environ["ADA_RAY_CACHE"]
    return client.submit_job(
        entrypoint=(f"python jobs/train_job.py grpo trainer.total_steps=2 trainer.output_dir={out} "
                    "trainer.run_name=job data.train_per_level=24 data.eval_per_level=4 "
                    "trainer.batch_prompts=6 trainer.eval_every=0 trainer.final_eval=false"),
        runtime_env={"working_dir": str(REPO),
                     "excludes": [".venv/", "runs/", "results/", ".git/", "**/__pycache__/", "*.egg-info/"],
                     "env_vars": env_vars},
    )


def test_job_submit_trains_and_tracks(tmp_path, model_path):
    from mlflow.tracking import MlflowClient
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray_bin = str(Path(sys.executable).parent / "ray")
    # as a user with the project's environment active: the job's `python` is the one with the stack
    # (CI runs pytest as .venv/bin/python without activating the venv, so PATH alone would not say so)
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    gcs, dash = free_port(), free_port()
    ray_tmp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths have a length limit
    subprocess.run([ray_bin, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
                    "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--num-cpus", "4",
                    "--dashboard-agent-listen-port", str(free_port()),  # another cluster may hold 52365
                    "--disable-usage-stats", "--temp-dir", ray_tmp],
                   check=True, env=env, capture_output=True, timeout=180)
    try:
        client = None
        deadline = time.time() + 180
        while client is None and time.time() < deadline:
            try:
                client = JobSubmissionClient(f"http://127.0.0.1:{dash}")
            except Exception:  # noqa: BLE001 - dashboard still starting
                time.sleep(2)
        out = tmp_path / "runs"
        job = None
        while job is None:  # the job agent may need a few more seconds than the dashboard
            try:
                job = submit(client, out)
            except RuntimeError as exc:
                if "No available agent" not in str(exc) or time.time() > deadline:
                    raise
                time.sleep(2)
        status = None
        deadline = time.time() + 900
        while time.time() < deadline:
            status = client.get_job_status(job)
            if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                break
            time.sleep(3)
        logs = client.get_job_logs(job)
        assert status == JobStatus.SUCCEEDED, logs[-3000:]
        assert "done: 2 steps" in logs
        mlc = MlflowClient(f"sqlite:///{out / 'job' / 'mlflow.db'}")
        (run,) = mlc.search_runs([mlc.get_experiment_by_name("ada_ray").experiment_id])
        assert run.info.status == "FINISHED" and "train/round0_reward" in run.data.metrics
    finally:
        stop_cluster(ray_tmp)


def stop_cluster(temp_dir: str) -> None:
    """Stop only the processes of the head started here (`ray stop` would stop every Ray on the host):
    those whose command line (or RAY_TMPDIR) names its temp dir, and all their descendants (workers and agents
    rename themselves ray::..., so only the tree finds them)."""
    import psutil

    procs = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            mine = any(temp_dir in part for part in (p.info["cmdline"] or []))
            if not mine and (p.info["cmdline"] or [""])[0].startswith("ray::"):
                mine = p.environ().get("RAY_TMPDIR") == temp_dir  # orphaned agents of a killed driver
            if mine:
                procs[p.pid] = p
                for c in p.children(recursive=True):
                    procs[c.pid] = c
        except psutil.Error:
            pass
    procs = list(procs.values())
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=20)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)
