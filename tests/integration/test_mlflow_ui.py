"""MLflow as users browse it: a real ``mlflow server`` on 127.0.0.1, a tiny training run logged
through ada_ray's tracking, then the run's tags, dataset inputs and logged model read back over
REST, and the run's page loaded in headless Chromium (skipped where no Chromium is installed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request

import pytest

from ada_ray.config import load_config
from ada_ray.driver.trainer import train
from tests.integration.conftest import mlflow_server_at, tiny_overrides

pytestmark = pytest.mark.slow

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server_at(tmp_path_factory.mktemp("mlflow_server")) as url:
        yield url


@pytest.fixture(scope="module")
def logged_run(ray_cluster, server, tmp_path_factory):
    """One training step logged to the server: (server url, experiment id, run)."""
    from mlflow import MlflowClient

    tmp = tmp_path_factory.mktemp("ui_run")
    cfg = load_config("ada_seq_balance", tiny_overrides(tmp, **{
        "tracking.enabled": "true", "tracking.uri": server, "tracking.experiment": "ui-test",
        "trainer.total_steps": 1}))
    assert train(cfg, config_name="ada_seq_balance") == 0
    client = MlflowClient(server)
    exp = client.get_experiment_by_name("ui-test")
    (run,) = client.search_runs([exp.experiment_id])
    return server, exp.experiment_id, run


def test_run_has_tags_datasets_and_a_logged_model(logged_run):
    from mlflow import MlflowClient

    url, exp_id, run = logged_run
    rest = json.load(urllib.request.urlopen(f"{url}/api/2.0/mlflow/runs/get?run_id={run.info.run_id}", timeout=30))
    tags = {t["key"]: t["value"] for t in rest["run"]["data"]["tags"]}
    assert tags["algorithm"] == "ada_seq_balance" and tags["mode"] == "async"
    assert tags["config_name"] == "ada_seq_balance" and len(tags["config_hash"]) == 12
    assert tags["git_commit"] and tags["model_path"]
    inputs = {next(t["value"] for t in d["tags"] if t["key"] == "mlflow.data.context"): d["dataset"]
              for d in rest["run"]["inputs"]["dataset_inputs"]}
    assert set(inputs) == {"training", "eval"}
    assert inputs["training"]["name"] == "embedded train" and json.loads(inputs["training"]["profile"])["num_rows"] > 0
    (out,) = rest["run"]["outputs"]["model_outputs"]
    client = MlflowClient(url)
    model = client.get_logged_model(out["model_id"])
    assert model.source_run_id == run.info.run_id and model.status.name == "READY"
    files = {f.path for f in client.list_logged_model_artifacts(model.model_id)}
    assert {"MLmodel", "model", "components"} <= files


def test_run_page_is_served_to_a_browser(logged_run, tmp_path):
    binary = next((b for b in map(shutil.which, CHROMIUM) if b), None)
    if binary is None:
        pytest.skip(f"no Chromium binary ({', '.join(CHROMIUM)}) on PATH: install it (apt-get install chromium) "
                    "to load the MLflow UI in a headless browser")
    url, exp_id, run = logged_run
    page = f"{url}/#/experiments/{exp_id}/runs/{run.info.run_id}"
    shot = tmp_path / "run.png"
    common = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--window-size=1400,1000"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(common + ["--dump-dom", page], capture_output=True, text=True, timeout=180, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<title>MLflow</title>" in dom.stdout and 'id="root"' in dom.stdout
    (out,) = run.outputs.model_outputs
    for shown in (run.data.tags["config_hash"], "embedded train", "Logged models (1)",  # the JS app rendered the run
                  f"#/experiments/{exp_id}/models/{out.model_id}"):
        assert shown in dom.stdout, f"{shown!r} is not on the rendered run page"
    res = subprocess.run(common + [f"--screenshot={shot}", page], capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, res.stderr[-2000:]
