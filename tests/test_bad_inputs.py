"""One test per row of docs/BAD_INPUTS.md that needs no Ray (the rest: integration/test_bad_inputs_runtime.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ada_ray.cli import main
from ada_ray.config import ConfigError, DataConfig, load_config
from ada_ray.data.datasets import DataError, load_splits, read_records, to_prompts
from ada_ray.rewards import SafeScorer, load_reward


def jsonl(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "train.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


class CharTok:
    """A stand-in tokenizer: one id per character (enough for length checks)."""

    chat_template = None

    def __call__(self, text):
        return {"input_ids": [1] + [ord(c) % 50 for c in text]}


def cfg_for(path: Path, **kw) -> DataConfig:
    return DataConfig(source="jsonl", train_path=str(path), max_prompt_tokens=kw.pop("max_prompt_tokens", 64), **kw)


def test_1_malformed_jsonl_line(tmp_path):
    p = jsonl(tmp_path, ['{"question": "1+1=", "answer": "2"}', '{"question": "2+2=", "answer": "4"}', "{oops"])
    with pytest.raises(DataError, match=rf"{p}:3: malformed JSON line"):
        read_records(str(p), cfg_for(p))


def test_2_missing_field(tmp_path):
    p = jsonl(tmp_path, ['{"question": "1+1=", "answer": "2"}', '{"id": 1, "question": "2+2="}'])
    with pytest.raises(DataError, match=rf"{p}:2: missing field 'answer'"):
        read_records(str(p), cfg_for(p))


def test_3_empty_dataset(tmp_path):
    p = jsonl(tmp_path, [""])
    with pytest.raises(DataError, match="the dataset is empty"):
        read_records(str(p), cfg_for(p))


def test_4_duplicate_ids_and_4b_duplicate_questions(tmp_path):
    p = jsonl(tmp_path, ['{"id": "a1", "question": "1+1=", "answer": "2"}', '{"id": "a2", "question": "2+2=", "answer": "4"}',
                         '{"id": "a3", "question": "3+3=", "answer": "6"}', '{"id": "a1", "question": "4+4=", "answer": "8"}'])
    c = cfg_for(p, id_field="id")
    with pytest.raises(DataError, match=r"train.jsonl:4: duplicate prompt id 'a1' \(first at .*train.jsonl:1\)"):
        to_prompts(read_records(str(p), c), c, CharTok(), str(p))
    p2 = jsonl(tmp_path, ['{"question": "1+1=", "answer": "2"}', '{"question": "1+1=", "answer": "2"}'])
    ps = to_prompts(read_records(str(p2), cfg_for(p2)), cfg_for(p2), CharTok(), str(p2))
    assert len(ps.prompts) == 1 and ps.dropped_duplicates == 1


def test_5_6_7_config_errors_through_the_cli(capsys):
    assert main(["show-config", "algo.nn=3"]) == 2
    assert "unknown config key 'algo.nn'" in capsys.readouterr().err
    assert main(["show-config", "algo.n=four"]) == 2
    assert "'algo.n'" in capsys.readouterr().err
    assert main(["show-config", "algo.samples_per_round=1", "algo.max_rounds=3"]) == 2
    assert "below algo.n" in capsys.readouterr().err


def test_8_missing_model_path(capsys):
    assert main(["eval", "model.path=/no/such/model"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from ada_ray.config import EmbeddedModelConfig
    from ada_ray.data.tiny_policy import build_model, build_tokenizer, save_policy

    d = tmp_path_factory.mktemp("m")
    tok = build_tokenizer()
    save_policy(build_model(EmbeddedModelConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                                                num_kv_heads=1), len(tok)), tok, d)
    return d


def test_9_corrupt_model(tmp_path, tiny_model_dir):
    from ada_ray.data.model_check import ModelError, check_policy_dir

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model_dir, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelError, match="model.safetensors is corrupt"):
        check_policy_dir(str(bad), load_config())
    (bad / "config.json").write_text("{broken")
    with pytest.raises(ModelError, match="config.json cannot be read"):
        check_policy_dir(str(bad), load_config())


def test_10_pickle_weights_only(tmp_path, tiny_model_dir):
    from ada_ray.data.model_check import ModelError, check_policy_dir

    d = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, d)
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    with pytest.raises(ModelError, match="does not unpickle"):
        check_policy_dir(str(d), load_config())


def test_11_tokenizer_mismatch(tmp_path, tiny_model_dir):
    from ada_ray.data.model_check import ModelError, check_policy_dir

    d = tmp_path / "mismatch"
    shutil.copytree(tiny_model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["vocab_size"] = 10
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="tokenizer has 19 tokens but the model's vocab_size is 10"):
        check_policy_dir(str(d), load_config())


def test_12_long_prompts_dropped_and_12b_context(tmp_path, tiny_model_dir):
    from ada_ray.data.model_check import check_policy_dir

    p = jsonl(tmp_path, ['{"question": "1+1=", "answer": "2"}', '{"question": "' + "9+" * 40 + '1=", "answer": "361"}'])
    ps = to_prompts(read_records(str(p), cfg_for(p, max_prompt_tokens=16)), cfg_for(p, max_prompt_tokens=16),
                    CharTok(), str(p))
    assert len(ps.prompts) == 1 and ps.dropped_too_long == 1
    with pytest.raises(ConfigError, match="exceeds the model's context"):
        check_policy_dir(str(tiny_model_dir), load_config(None, ["sampler.max_model_len=128"]))


def test_13_14_15_reward_functions_that_misbehave():
    s = SafeScorer("tests.rewards.plugins:raises")
    assert s.score(["x"], ["1"]) == [(0.0, True)] and s.stats.errors == 1
    s = SafeScorer("tests.rewards.plugins:not_a_number")
    assert s.score(["x"], ["1"]) == [(0.0, True)] and s.stats.invalid == 1
    s = SafeScorer("tests.rewards.plugins:hangs_on_hang", timeout_s=0.5, workers=1)
    try:
        assert s.score(["hang"], ["1"]) == [(0.0, True)] and s.stats.timeouts == 1
    finally:
        s.close()


def test_16_unimportable_reward_plugin():
    with pytest.raises(ValueError, match="cannot import module 'no.such.module'"):
        load_reward("no.such.module:fn")


def test_18_port_in_use():
    import socket

    from ada_ray.sync.weight_bus import WeightBusSender

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        with pytest.raises(OSError, match="Address already in use"):
            WeightBusSender(2, "gloo", "127.0.0.1", port=s.getsockname()[1])
    finally:
        s.close()


def test_20_21_checkpoint_checks(tmp_path):
    from ada_ray import checkpoint as ckpt
    from ada_ray.config import to_dict

    saved = to_dict(load_config(None, ["algo.n=4"]))
    with pytest.raises(ConfigError, match=r"different config \(algo.n: 4 -> 8"):
        ckpt.check_compatible(saved, load_config(None, ["algo.n=8"]), tmp_path)
    ckpt.check_compatible(saved, load_config(None, ["trainer.total_steps=999"]), tmp_path)  # allowed change
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        ckpt.resolve_resume(load_config(None, [f"trainer.resume={tmp_path}"]), tmp_path)


def test_22_missing_dataset_file():
    c = DataConfig(source="jsonl", train_path="/no/such.jsonl")
    with pytest.raises(DataError, match="dataset not found: /no/such.jsonl"):
        load_splits(c, CharTok())


def test_23_eval_split_too_large():
    with pytest.raises(ConfigError, match="data.eval_per_level"):
        load_config(None, ["data.eval_per_level=201"])
