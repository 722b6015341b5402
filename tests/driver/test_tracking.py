"""Tracking against a real MLflow sqlite store in tmp_path, read back with MlflowClient: the run's
tags, its dataset inputs, the final policy as a logged transformers model, and the failures that
must not stop a run (flavour missing or failing, server unreachable, no git)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ada_ray.algo.types import Prompt
from ada_ray.config import load_config
from ada_ray.data.datasets import PromptSet
from ada_ray.driver.tracking import Tracker, config_hash, git_commit, run_tags

EMBEDDED_POLICY = Path(__file__).resolve().parents[2] / "ada_ray" / "data" / "embedded_policy"


def prompt_set(n: int, source: str) -> PromptSet:
    return PromptSet([Prompt(f"p{i}", f"{i}+1=", (1, 2), str(i + 1), "2x1") for i in range(n)], source=source)


def store(tmp_path: Path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def tracker(tmp_path: Path, lines: list, uri=None) -> Tracker:
    return Tracker(tmp_path, True, uri, "unit", "r", log=lines.append)


def test_tags_and_dataset_inputs_read_back(tmp_path):
    cfg = load_config("grpo")
    train_file = tmp_path / "train.jsonl"
    train_file.write_text('{"question": "1+1=", "answer": "2"}\n')
    lines: list[str] = []
    t = tracker(tmp_path, lines)
    t.set_tags(run_tags(cfg, "/models/base", "grpo"))
    t.log_dataset(prompt_set(30, str(train_file)), "training")
    t.log_dataset(prompt_set(5, "embedded eval"), "eval")
    t.log_dataset(None, "eval")  # no eval split: nothing
    t.close()
    assert lines == []
    run = store(tmp_path).get_run(t.run_id)
    tags = run.data.tags
    short, full = git_commit()
    assert {k: tags[k] for k in ("algorithm", "mode", "config_name", "model_path", "git_commit")} == {
        "algorithm": "grpo", "mode": cfg.trainer.mode, "config_name": "grpo", "model_path": "/models/base",
        "git_commit": short}
    assert tags["config_hash"] == config_hash(cfg) and len(tags["config_hash"]) == 12
    if full:
        assert tags["mlflow.source.git.commit"] == full and full.startswith(short)
    inputs = {next(tg.value for tg in d.tags if tg.key == "mlflow.data.context"): d.dataset
              for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"training", "eval"}
    assert inputs["training"].name == "train.jsonl" and inputs["training"].source_type == "local"
    assert str(train_file) in inputs["training"].source
    assert '"num_rows": 30' in inputs["training"].profile and inputs["training"].digest
    assert inputs["eval"].name == "embedded eval" and inputs["eval"].source_type == "code"
    assert '"num_rows": 5' in inputs["eval"].profile and inputs["eval"].digest != inputs["training"].digest


def test_config_hash_is_stable_and_follows_the_config():
    assert config_hash(load_config("grpo")) == config_hash(load_config("grpo"))
    assert config_hash(load_config("grpo")) != config_hash(load_config("grpo", ["trainer.total_steps=7"]))


def test_git_commit_unknown_outside_a_checkout_or_without_git(tmp_path, monkeypatch):
    assert git_commit(tmp_path) == ("unknown", "")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git binary
    assert git_commit() == ("unknown", "")


def test_final_policy_is_a_logged_transformers_model(tmp_path, monkeypatch):
    import yaml

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # another server, left as it was
    final = tmp_path / "final"
    shutil.copytree(EMBEDDED_POLICY, final)
    lines: list[str] = []
    t = tracker(tmp_path, lines, uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    model_id = t.log_model(final)
    t.close()
    assert lines == [] and model_id
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:9"
    client = store(tmp_path)
    run = client.get_run(t.run_id)
    assert run.info.status == "FINISHED"
    assert [o.model_id for o in run.outputs.model_outputs] == [model_id]
    model = client.get_logged_model(model_id)
    assert model.source_run_id == t.run_id and model.status.name == "READY" and model.name == "policy"
    assert model.experiment_id == run.info.experiment_id
    mlmodel = yaml.safe_load((Path(model.artifact_location.removeprefix("file://")) / "MLmodel").read_text())
    assert mlmodel["flavors"]["transformers"]["task"] == "text-generation"


@pytest.mark.parametrize("failure", ["flavour missing", "log_model fails"])
def test_model_logging_failure_is_one_warning_and_the_run_finishes(tmp_path, monkeypatch, failure):
    if failure == "flavour missing":
        monkeypatch.setitem(sys.modules, "mlflow.transformers", None)  # import raises ImportError
    else:
        import mlflow.transformers

        def boom(*a, **k):
            raise RuntimeError("transformers flavour broke")

        monkeypatch.setattr(mlflow.transformers, "log_model", boom)
    lines: list[str] = []
    t = tracker(tmp_path, lines)
    assert t.log_model(tmp_path) is None
    t.log_metrics(1, {"x": 1.0})
    t.close()
    assert len(lines) == 1 and "the final policy is not logged as an MLflow model" in lines[0]
    why = "ModuleNotFoundError" if failure == "flavour missing" else "RuntimeError: transformers flavour broke"
    assert why in lines[0]
    run = store(tmp_path).get_run(t.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["x"] == 1.0


def test_unreachable_server_tags_datasets_model_never_raise(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lines: list[str] = []
    t = tracker(tmp_path, lines, uri=f"http://127.0.0.1:{port}")
    t.set_tags({"algorithm": "grpo"})
    t.log_dataset(prompt_set(3, "embedded train"), "training")
    assert t.log_model(tmp_path) is None
    t.close()
    assert sum("is unreachable" in line for line in lines) == 1  # one warning for the server
    assert sum("final policy is not logged as an MLflow model (no answer" in line for line in lines) == 1
    assert t._pending_tags and t._pending_inputs  # kept for when the server answers


def test_git_commit_matches_git_here():
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=10)
    except OSError:
        pytest.skip("no git binary")
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    short, full = git_commit()
    assert full == head.stdout.strip() and full.startswith(short) and 7 <= len(short) < len(full)


def test_a_resumed_run_keeps_its_first_params_and_gets_its_metrics(tmp_path):
    """A resume changes resumable keys (trainer.resume, total_steps): MLflow params cannot change, so
    the first values stay and the metrics still arrive (a refused param once held every metric back)."""
    lines: list = []
    first = tracker(tmp_path, lines)
    first.log_params({"trainer.resume": None, "trainer.total_steps": 2})
    first.log_metrics(1, {"x": 1.0})
    first.close()
    (tmp_path / "mlflow_run.json").unlink()  # as on another node: the id comes from the checkpoint
    again = Tracker(tmp_path, True, None, "unit", "r", log=lines.append, resume_run_id=first.run_id)
    again.log_params({"trainer.resume": "auto", "trainer.total_steps": 4, "trainer.staging_dir": "/s"})
    again.log_metrics(2, {"x": 2.0})
    again.close()
    assert again.run_id == first.run_id and not [x for x in lines if "unreachable" in x], lines
    run = store(tmp_path).get_run(first.run_id)
    assert run.data.params["trainer.resume"] == "None" and run.data.params["trainer.staging_dir"] == "/s"
    assert [m.step for m in store(tmp_path).get_metric_history(first.run_id, "x")] == [1, 2]
