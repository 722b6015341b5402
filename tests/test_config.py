from pathlib import Path

import pytest

from ada_ray.config import CONF_DIR, ConfigError, flatten, from_dict, load_config, to_dict


def err(overrides, path=None):
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    return str(e.value)


def test_defaults_load_and_roundtrip():
    cfg = load_config()
    assert cfg.algo.name == "ada_seq_balance" and cfg.trainer.mode == "async"
    assert from_dict(to_dict(cfg)) == cfg
    flat = flatten(cfg)
    assert flat["algo.n"] == 4 and flat["trainer.batch_prompts"] == 32


@pytest.mark.parametrize("preset", sorted(p.name for p in CONF_DIR.glob("*.yaml")))
def test_every_preset_loads(preset):
    load_config(CONF_DIR / preset)


def test_algorithm_presets_exist():
    names = {p.stem for p in CONF_DIR.glob("*.yaml")}
    assert {"default", "grpo", "dapo", "ada_seq_pos", "ada_seq_balance", "ada_est"} <= names
    assert load_config("grpo").algo.name == "grpo"
    assert load_config("ada_est").algo.name == "ada_est"


def test_dotted_overrides_and_types():
    cfg = load_config(None, ["algo.n=8", "trainer.mode=sync", "algo.dual_clip_c=null", "data.levels=[2x1,3x1]"])
    assert cfg.algo.n == 8 and cfg.trainer.mode == "sync" and cfg.algo.dual_clip_c is None
    assert cfg.data.levels == ["2x1", "3x1"]


def test_unknown_key_names_key_and_valid_keys():
    msg = err(["algo.nn=3"])
    assert "unknown config key 'algo.nn'" in msg and "samples_per_round" in msg
    assert "unknown config key 'foo'" in err(["foo.bar=1"])


def test_unknown_key_in_yaml_names_the_file(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text("trainer:\n  total_stepz: 3\n")
    msg = err([], f)
    assert str(f) in msg and "trainer.total_stepz" in msg


def test_wrong_type_names_key_and_expected_type():
    msg = err(["algo.n=four"])
    assert "'algo.n'" in msg and "int" in msg


@pytest.mark.parametrize("overrides,needle", [
    (["algo.name=ada_seq_balance", "algo.n=1"], "algo.n"),
    (["algo.max_rounds=0"], "algo.max_rounds"),
    (["algo.samples_per_round=0"], "algo.samples_per_round"),
    (["algo.samples_per_round=1", "algo.max_rounds=3"], "below algo.n"),
    (["algo.name=grpo", "algo.n=1"], "algo.n"),
    (["algo.name=bogus"], "algo.name"),
    (["algo.k_pos=30", "algo.k_neg=10"], "algo.k_pos + algo.k_neg"),
    (["algo.name=ada_est", "algo.est_mean_samples=64"], "algo.est_mean_samples"),
    (["algo.name=ada_est", "algo.est_n_min=5", "algo.est_n_max=3"], "algo.est_n_max"),
    (["algo.clip_low=1.5"], "algo.clip_low"),
    (["algo.dual_clip_c=0.5"], "algo.dual_clip_c"),
    (["trainer.mode=semi"], "trainer.mode"),
    (["trainer.batch_prompts=0"], "trainer.batch_prompts"),
    (["trainer.queue_shards=0"], "trainer.queue_shards"),
    (["trainer.queue_shards=5", "trainer.batch_prompts=4"], "trainer.batch_prompts = 4 is below trainer.queue_shards = 5"),
    (["learner.zero_stage=4"], "learner.zero_stage"),
    (["learner.num_learners=4", "trainer.batch_prompts=2"], "learner.num_learners"),
    (["data.max_prompt_tokens=60", "sampler.max_new_tokens=8"], "sampler.max_model_len"),
    (["data.levels=[2y1]"], "data.levels"),
    (["data.source=jsonl"], "data.train_path"),
    (["sampler.report_interval_s=-0.1"], "'sampler.report_interval_s' must be in [0, 10] seconds"),
    (["sampler.report_interval_s=250"], "'sampler.report_interval_s' must be in [0, 10] seconds"),
])
def test_impossible_settings_are_one_clear_error(overrides, needle):
    assert needle in err(overrides)


def test_bad_override_syntax():
    assert "key=value" in err(["algo.n"])


def test_missing_config_file():
    assert "not found" in err([], "no/such/file.yaml")


def test_defaults_list_inheritance(tmp_path: Path):
    (tmp_path / "base.yaml").write_text("algo:\n  n: 6\ntrainer:\n  total_steps: 7\n")
    (tmp_path / "child.yaml").write_text("defaults: [base.yaml]\nalgo:\n  n: 8\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert cfg.algo.n == 8 and cfg.trainer.total_steps == 7


def test_config_reference_is_up_to_date():
    from ada_ray.config_doc import render

    committed = (CONF_DIR.parent / "docs" / "CONFIG.md").read_text()
    assert committed == render(), "docs/CONFIG.md is stale: run `python -m ada_ray.config_doc`"
