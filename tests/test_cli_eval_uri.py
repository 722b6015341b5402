"""`ada-ray eval` on a checkpoint at a storage URI: only the policy and trainer.json of a training
checkpoint come down (not the DeepSpeed state), a run's final/ folder comes with its run's config,
the copy is gone after, and a missing checkpoint is one clear error."""

import json

from ada_ray import cli
from ada_ray.config import load_config, to_dict


def _training_checkpoint(root, cfg):
    ck = root / "run" / "checkpoints" / "step_4"
    (ck / "hf").mkdir(parents=True)
    (ck / "hf" / "config.json").write_text("{}")
    (ck / "hf" / "model.safetensors").write_bytes(b"w" * 100)
    (ck / "trainer.json").write_text(json.dumps({"step": 4, "config": to_dict(cfg)}))
    (ck / "learner_0" / "global_step4").mkdir(parents=True)  # DeepSpeed state: never fetched for eval
    (ck / "learner_0" / "global_step4" / "optim_states.pt").write_bytes(b"o" * 1000)
    return ck


def test_training_checkpoint_at_a_uri_fetches_policy_and_config_only(tmp_path):
    cfg = load_config("grpo", ["algo.n=6"])
    ck = _training_checkpoint(tmp_path, cfg)
    with cli.fetched_checkpoint(f"file://{ck}", str(tmp_path / "staging")) as local:
        assert sorted(p.name for p in local.iterdir()) == ["hf", "trainer.json"]
        assert (local / "hf" / "model.safetensors").read_bytes() == b"w" * 100
        model_dir, saved = cli.checkpoint_config(local)
        assert model_dir == str((local / "hf").resolve()) and saved["algo"]["n"] == 6
    assert not local.exists() and list((tmp_path / "staging").iterdir()) == []


def test_final_folder_at_a_uri_comes_with_its_runs_config(tmp_path):
    final = tmp_path / "run" / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (tmp_path / "run" / "config.yaml").write_text("algo:\n  n: 5\n")
    with cli.fetched_checkpoint(f"file://{final}/", str(tmp_path / "staging")) as local:
        model_dir, saved = cli.checkpoint_config(local)
        assert model_dir == str(local.resolve()) and saved == {"algo": {"n": 5}}


def test_eval_cli_runs_on_the_fetched_copy(tmp_path, monkeypatch):
    ck = _training_checkpoint(tmp_path, load_config("grpo", ["algo.n=6"]))
    seen = {}

    def fake_eval(cfg, args):
        seen["model"], seen["n"] = cfg.model.path, cfg.algo.n
        seen["there"] = (cli.Path(cfg.model.path) / "model.safetensors").is_file()  # the copy exists during the eval
        return 0

    monkeypatch.setitem(cli.COMMANDS, "eval", fake_eval)
    assert cli.main(["eval", f"file://{ck}", "algo.n=7"]) == 0
    assert seen["there"] and seen["n"] == 7 and seen["model"].endswith("/step_4/hf")
    assert not cli.Path(seen["model"]).exists()


def test_missing_checkpoint_at_a_uri_is_one_clear_error(tmp_path, capsys):
    assert cli.main(["eval", f"file://{tmp_path}/no/such/step_9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ada-ray: ") and "no such folder" in err and "step_9" in err
