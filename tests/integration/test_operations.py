"""Operations against the real things: an MLflow server, checkpoint + resume, `ada-ray eval`, plots."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ada_ray.config import load_config
from ada_ray.driver.trainer import train
from tests.integration.conftest import free_port, mlflow_server_at, tiny_overrides

pytestmark = pytest.mark.slow


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture
def mlflow_server(tmp_path):
    with mlflow_server_at(tmp_path) as url:
        yield url


def test_mlflow_server_gets_params_metrics_artifacts(ray_cluster, tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **{
        "tracking.enabled": "true", "tracking.uri": mlflow_server, "tracking.experiment": "ops-test",
        "trainer.eval_every": 2, "trainer.total_steps": 2}))
    assert train(cfg) == 0
    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("ops-test")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["algo.name"] == "ada_seq_balance" and run.data.params["trainer.total_steps"] == "2"
    for key in ("train/round0_reward", "train/zero_signal_share", "train/samples_per_prompt", "train/staleness_mean",
                "sampler/idle_ratio", "learner/idle_ratio", "perf/groups_per_s", "learner/loss",
                "learner/clip_frac", "learner/entropy", "learner/grad_norm", "learner/lr",
                "eval/avg_8", "eval/pass_8"):  # MLflow keys: '@' is not allowed, it becomes '_'

        assert key in run.data.metrics, key
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/round0_reward")] == [1, 2]
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "plots", "final_policy", "accounting.json"} <= top
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert "plots/reward.png" in plots


def test_tracking_server_down_run_completes(ray_cluster, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = load_config("grpo", tiny_overrides(tmp_path, **{"tracking.enabled": "true", "tracking.uri": dead,
                                                           "trainer.total_steps": 2}))
    assert train(cfg) == 0
    out = capsys.readouterr().out
    assert out.count("is unreachable") == 1  # warned once
    assert len([r for r in rows(tmp_path / "run" / "metrics.jsonl") if "train/groups" in r]) == 2


def test_tracker_buffers_until_server_returns(tmp_path):
    """Unit-level: metrics logged while the server is down arrive once it answers."""
    from ada_ray.driver.tracking import Tracker

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t = Tracker(tmp_path, True, url, "buffer-test", "r", log=lambda s: None)
    t.log_params({"a": 1})
    t.log_metrics(1, {"x": 1.0})
    assert t.run_id is None and len(t._pending_metrics) == 1
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'm.db'}",
                             "--artifacts-destination", str(tmp_path / "art")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        t._next_retry = 0.0
        t.log_metrics(2, {"x": 2.0})
        assert t.run_id is not None
        from mlflow.tracking import MlflowClient

        hist = MlflowClient(url).get_metric_history(t.run_id, "x")
        assert sorted(m.step for m in hist) == [1, 2]
        t.close()
    finally:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _final_weights(run_dir: Path):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "model.safetensors"))


def test_sync_resume_matches_uninterrupted(ray_cluster, tmp_path):
    base = {"trainer.mode": "sync", "trainer.save_every": 2}
    full_dir, part_dir = tmp_path / "full", tmp_path / "part"
    cfg = load_config("ada_seq_balance", tiny_overrides(full_dir, **base, **{"trainer.total_steps": 4}))
    assert train(cfg) == 0
    cfg = load_config("ada_seq_balance", tiny_overrides(part_dir, **base, **{"trainer.total_steps": 2}))
    assert train(cfg) == 0
    cfg = load_config("ada_seq_balance", tiny_overrides(part_dir, **base, **{"trainer.total_steps": 4,
                                                                             "trainer.resume": "auto"}))
    assert train(cfg) == 0
    a = [r for r in rows(full_dir / "run" / "metrics.jsonl") if "train/groups" in r]
    b = [r for r in rows(part_dir / "run" / "metrics.jsonl") if "train/groups" in r]
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        for k in ("train/round0_reward", "train/kept_reward", "train/samples_generated", "train/zero_signal_share"):
            assert ra[k] == rb[k], (ra["step"], k)
        assert ra["learner/loss"] == pytest.approx(rb["learner/loss"], rel=1e-4, abs=1e-6)
    wa, wb = _final_weights(full_dir / "run"), _final_weights(part_dir / "run")
    for k in wa:
        assert (wa[k] - wb[k]).abs().max().item() < 1e-5, k
    pa = rows(full_dir / "run" / "trained_prompts.jsonl")
    pb = rows(part_dir / "run" / "trained_prompts.jsonl")
    assert [r["prompts"] for r in pa] == [r["prompts"] for r in pb]


def test_async_resume_loses_and_repeats_no_prompt(ray_cluster, tmp_path):
    extra = {"trainer.save_every": 2, "trainer.total_epochs": 1}
    cfg = load_config("ada_seq_pos", tiny_overrides(tmp_path, **extra, **{"trainer.total_steps": 2}))
    assert train(cfg) == 0
    cfg = load_config("ada_seq_pos", tiny_overrides(tmp_path, **extra, **{"trainer.total_steps": 5,
                                                                         "trainer.resume": "auto"}))
    assert train(cfg) == 0
    trained = [p for r in rows(tmp_path / "run" / "trained_prompts.jsonl") for p in r["prompts"]]
    assert len(trained) == 5 * cfg.trainer.batch_prompts
    assert len(set(trained)) == len(trained)  # one epoch: no prompt twice
    acct = json.loads((tmp_path / "run" / "accounting.json").read_text())
    assert acct["items_ok"] and acct["prompts_ok"]


def test_eval_cli_on_checkpoint_matches_in_training_eval(ray_cluster, tmp_path):
    cfg = load_config("grpo", tiny_overrides(tmp_path, **{"trainer.total_steps": 2, "trainer.save_every": 2,
                                                          "trainer.eval_every": 2, "data.eval_per_level": 8}))
    assert train(cfg) == 0
    in_training = [r for r in rows(tmp_path / "run" / "metrics.jsonl") if r["step"] == 2 and "eval/avg@8" in r][0]
    out = tmp_path / "eval.json"
    env_cmd = [sys.executable, "-m", "ada_ray", "eval", str(tmp_path / "run" / "checkpoints" / "step_2"),
               "--json", str(out)]
    res = subprocess.run(env_cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    offline = json.loads(out.read_text())
    assert offline["num_prompts"] == len(cfg.data.levels) * 8
    assert offline["avg_at_k"] == pytest.approx(in_training["eval/avg@8"], abs=0.02)


def test_plots_are_valid_pngs(ray_cluster, tmp_path):
    import matplotlib.image as mpimg

    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **{"trainer.total_steps": 3}))
    assert train(cfg) == 0
    pngs = sorted((tmp_path / "run" / "plots").glob("*.png"))
    assert {p.name for p in pngs} == {"reward.png", "sampling.png", "phat_hist.png"}
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert mpimg.imread(p).shape[0] > 100


def test_tracker_resumes_the_recorded_run_or_starts_a_new_one(tmp_path):
    """On resume the checkpoint's MLflow run id is attached to; an id the store does not know
    (e.g. the run was deleted) starts a new run with a log line instead of failing."""
    from ada_ray.driver.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    for d in "abc":
        (tmp_path / d).mkdir()
    first = Tracker(tmp_path / "a", True, uri, "resume-test", "r", log=lambda s: None)
    first.close()
    again = Tracker(tmp_path / "b", True, uri, "resume-test", "r", log=lambda s: None, resume_run_id=first.run_id)
    assert again.run_id == first.run_id
    again.close()
    lines = []
    fresh = Tracker(tmp_path / "c", True, uri, "resume-test", "r", log=lines.append, resume_run_id="0" * 32)
    assert fresh.run_id not in (None, "0" * 32) and any("starting a new MLflow run" in x for x in lines)
    fresh.close()
