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
    """A stand-in tokenizer: one id per character (enough for length checks); like a Hugging Face
    tokenizer it takes one text or a list of them."""

    chat_template = None

    def __call__(self, text):
        if isinstance(text, list):
            return {"input_ids": [self(t)["input_ids"] for t in text]}
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
    from ada_ray.driver import checkpoint as ckpt
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


# ---- rows 29-44: data files a new user feeds ------------------------------------------------------

def rec(q="1+1=", a="2", **extra) -> str:
    return json.dumps({"question": q, "answer": a, **extra})


def test_29_fewer_unique_prompts_than_the_batch(tmp_path, capsys):
    p = jsonl(tmp_path, [rec()] * 3)  # the same question three times
    out = tmp_path / "runs"
    args = ["train", "data.source=jsonl", f"data.train_path={p}", "trainer.batch_prompts=2",
            f"trainer.output_dir={out}", "trainer.run_name=r"]
    assert main(args) == 2  # refused before Ray or any actor starts (the queue used to loop forever)
    err = capsys.readouterr().err
    assert f"{p}: 1 unique prompt (after dropping 2 duplicates), fewer than trainer.batch_prompts = 2" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()  # one line, nothing written


def test_30_bom_crlf_and_utf16_files_are_read(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + (rec() + "\r\n" + rec("2+2=", "4") + "\r\n").encode())
    assert [(r.question, r.answer) for r in read_records(str(p), cfg_for(p))] == [("1+1=", "2"), ("2+2=", "4")]
    p.write_bytes(b"\xef\xbb\xbf" + (rec() + "\r\n\r\n" + '{"question": "3+3=", "answer": }' + "\r\n").encode())
    with pytest.raises(DataError, match=rf"{p}:3: malformed JSON line \(Expecting value at column 32\)"):
        read_records(str(p), cfg_for(p))  # a truly broken line keeps its error
    p.write_text(rec("½+½=", "1") + "\r\n", encoding="utf-16")  # Notepad's "Unicode"
    assert [r.question for r in read_records(str(p), cfg_for(p))] == ["½+½="]


def test_31_directory_as_train_path(tmp_path):
    (tmp_path / "train.jsonl").write_text(rec() + "\n")
    (tmp_path / "test.jsonl").write_text(rec() + "\n")
    with pytest.raises(DataError, match=rf"{tmp_path}: is a directory, but data.source=jsonl reads one file; "
                                        "point the path at one of its files: test.jsonl, train.jsonl"):
        read_records(str(tmp_path), cfg_for(tmp_path))
    hf = tmp_path / "saved"
    hf.mkdir()
    (hf / "state.json").write_text("{}")
    with pytest.raises(DataError, match="looks like a datasets save_to_disk folder: set data.source=hf_disk"):
        read_records(str(hf), cfg_for(hf))


def test_32_parquet_without_the_question_or_answer_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "train.parquet"
    pq.write_table(pa.table({"problem": ["1+1="], "answer": ["2"]}), p)
    c = DataConfig(source="parquet", train_path=str(p))
    with pytest.raises(DataError, match=rf"{p}: no column 'question' \(data.question_field\); "
                                        r"the file has columns \['answer', 'problem'\]"):
        read_records(str(p), c)
    pq.write_table(pa.table({"question": ["1+1=", "2+2="], "answer": [2, None]}), p)  # ints with a gap
    with pytest.raises(DataError, match=rf"{p}:row 1: field 'answer' \(data.answer_field\) is null"):
        read_records(str(p), c)


def test_33_compressed_jsonl_is_read_zip_and_zstd_refused(tmp_path):
    import bz2
    import gzip
    import lzma

    body = (rec() + "\n" + rec("2+2=", "4") + "\n").encode()
    for name, pack in (("t.jsonl.gz", gzip.compress), ("t.jsonl.bz2", bz2.compress), ("t.jsonl.xz", lzma.compress),
                       ("gzipped-anyway.jsonl", gzip.compress)):
        p = tmp_path / name
        p.write_bytes(pack(b"\xef\xbb\xbf" + body))
        assert [r.answer for r in read_records(str(p), cfg_for(p))] == ["2", "4"], name
    p = tmp_path / "torn.jsonl.gz"
    p.write_bytes(gzip.compress(body * 50)[:-20])
    with pytest.raises(DataError, match=rf"{p}: cannot read the file after line \d+"):
        read_records(str(p), cfg_for(p))
    p = tmp_path / "t.jsonl.zip"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 30)
    with pytest.raises(DataError, match=rf"{p}: is a zip archive; unzip it"):
        read_records(str(p), cfg_for(p))
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 30)
    with pytest.raises(DataError, match="is zstd-compressed"):
        read_records(str(p), cfg_for(p))


def test_34_answers_that_are_numbers_or_not_scalars(tmp_path):
    p = jsonl(tmp_path, [rec("a", 4), rec("b", 4.0), rec("c", 2.5), rec("d", -7)])
    assert [r.answer for r in read_records(str(p), cfg_for(p))] == ["4", "4", "2.5", "-7"]
    for bad, kind in ((True, "true/false"), ([1, 2], "an array"), ({"v": 1}, "an object")):
        p = jsonl(tmp_path, [rec(), rec("b", bad)])
        with pytest.raises(DataError, match=rf"{p}:2: field 'answer' \(data.answer_field\) must be a string or a "
                                            f"number, got {kind}"):
            read_records(str(p), cfg_for(p))
    p = jsonl(tmp_path, ['{"question": "x", "answer": Infinity}'])
    with pytest.raises(DataError, match="must be a finite number, got inf"):
        read_records(str(p), cfg_for(p))


def test_35_unicode_digits_in_answers_read_as_ascii(tmp_path):
    from ada_ray.rewards.exact import exact_match

    p = jsonl(tmp_path, [rec("a", "４２"), rec("b", "٤٢"), rec("c", "४२.५"), rec("d", "x² + ½")])
    answers = [r.answer for r in read_records(str(p), cfg_for(p))]
    assert answers == ["42", "42", "42.5", "x² + ½"]  # decimal digits only: superscripts and fractions as written
    assert exact_match("42", answers[1]) == 1.0
    p = jsonl(tmp_path, [rec("٤+٤=", "8")])
    assert read_records(str(p), cfg_for(p))[0].question == "٤+٤="  # the question is shown to the model as written


def test_36_empty_question_or_answer(tmp_path):
    for line, msg in ((rec(""), "field 'question' must be a non-empty string, got ''"),
                      (rec("   \t"), "field 'question' must be a non-empty string"),
                      (rec("1+1=", " "), r"field 'answer' \(data.answer_field\) must be a non-empty answer")):
        p = jsonl(tmp_path, [rec(), line])
        with pytest.raises(DataError, match=rf"{p}:2: {msg}"):
            read_records(str(p), cfg_for(p))


class VocabTok(CharTok):
    """CharTok with a vocabulary (longest piece: 3 characters) that records what it tokenizes."""

    def __init__(self):
        self.seen: list[int] = []

    def get_vocab(self):
        return {"a": 0, "bb": 1, "ccc": 2}

    def __call__(self, text):
        self.seen.extend(len(t) for t in (text if isinstance(text, list) else [text]))
        return super().__call__(text)


def test_37_huge_line_is_dropped_without_tokenizing(tmp_path):
    p = jsonl(tmp_path, [rec(), rec("9+" * 5_000_000 + "1=", "5000001")])  # a 10 MB line
    tok = VocabTok()
    ps = to_prompts(read_records(str(p), cfg_for(p)), cfg_for(p), tok, str(p))
    assert len(ps.prompts) == 1 and ps.dropped_too_long == 1
    assert max(tok.seen) < 100  # the huge question never reached the tokenizer


def test_38_line_that_is_not_a_json_object(tmp_path):
    p = jsonl(tmp_path, [rec(), "[" + rec("2+2=", "4") + "]"])
    with pytest.raises(DataError, match=rf"{p}:2: expected a JSON object \(one record\), got an array; "
                                        "data.source=jsonl expects one JSON object per line"):
        read_records(str(p), cfg_for(p))
    p = jsonl(tmp_path, [rec(), '"just a string"'])
    with pytest.raises(DataError, match=rf"{p}:2: expected a JSON object \(one record\), got a string"):
        read_records(str(p), cfg_for(p))
    p = jsonl(tmp_path, ["[", "  " + rec() + ",", "  " + rec("2+2=", "4"), "]"])  # a pretty-printed .json file
    with pytest.raises(DataError, match=rf"{p}:1: malformed JSON line .*looks like one pretty-printed JSON document"):
        read_records(str(p), cfg_for(p))


def test_39_null_fields(tmp_path):
    for line, msg in (('{"question": null, "answer": "2"}', r"field 'question' \(data.question_field\) is null"),
                      ('{"question": "1+1=", "answer": NaN}', r"field 'answer' \(data.answer_field\) is null"),
                      (rec(id=None), r"field 'id' \(data.id_field\) is null")):
        p = jsonl(tmp_path, [rec(id="a0"), line])
        with pytest.raises(DataError, match=rf"{p}:2: {msg}"):
            read_records(str(p), cfg_for(p, id_field="id"))
    p = jsonl(tmp_path, [rec(level=None), rec("2+2=", "4", level=3)])
    assert [r.difficulty for r in read_records(str(p), cfg_for(p, difficulty_field="level"))] == ["", "3"]


def test_40_same_question_with_another_answer(tmp_path):
    p = jsonl(tmp_path, [rec(), rec("2+2=", "4"), rec("1+1=", "3")])
    with pytest.raises(DataError, match=rf"{p}:3: the same question as {p}:1 with another answer "
                                        r"\('3' here, '2' there\)"):
        to_prompts(read_records(str(p), cfg_for(p)), cfg_for(p), CharTok(), str(p))


def test_41_file_that_is_not_utf8(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes((rec() + "\n").encode() + '{"question": "café", "answer": "1"}'.encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=rf"{p}:2: not UTF-8 text \(byte 0xe9 at column 18\); save the file as UTF-8"):
        read_records(str(p), cfg_for(p))


def test_42_file_that_does_not_match_data_source(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pqf = tmp_path / "train.parquet"
    pq.write_table(pa.table({"question": ["1+1="], "answer": ["2"]}), pqf)
    with pytest.raises(DataError, match=rf"{pqf}: is a Parquet file; set data.source=parquet"):
        read_records(str(pqf), cfg_for(pqf))
    p = jsonl(tmp_path, [rec()])
    with pytest.raises(DataError, match=rf"{p}: cannot read as Parquet .*it looks like JSON: set data.source=jsonl"):
        read_records(str(p), DataConfig(source="parquet", train_path=str(p)))
    with pytest.raises(DataError, match=rf"{p}: is a file, but data.source=hf_disk expects a folder"):
        read_records(str(p), DataConfig(source="hf_disk", train_path=str(p)))


def test_43_data_path_with_the_embedded_source(capsys):
    assert main(["show-config", "data.train_path=data/train.jsonl"]) == 2
    assert ("config: data.train_path is set, but data.source = embedded (the built-in task) ignores it; "
            "set data.source=jsonl, parquet or hf_disk") in capsys.readouterr().err


def test_44_unreadable_file(tmp_path, monkeypatch):
    import ada_ray.data.datasets as ds

    p = jsonl(tmp_path, [rec()])

    def denied(path, *a, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ds, "open", denied, raising=False)  # (chmod 000 does not stop root)
    with pytest.raises(DataError, match=rf"{p}: cannot read the file \(\[Errno 13\] Permission denied"):
        read_records(str(p), cfg_for(p))


# ---- rows 45-47: where a run's files go (trainer.output_dir as a folder or a storage URI) ---------------


def test_45_unknown_storage_scheme(capsys, tmp_path):
    assert main(["train", "trainer.output_dir=foo://bucket/runs", "trainer.run_name=r"]) == 2
    err = capsys.readouterr().err
    assert "trainer.output_dir='foo://bucket/runs': unknown storage scheme 'foo'; pyarrow.fs opens s3://" in err


def test_46_storage_that_cannot_be_opened(capsys):
    assert main(["train", "trainer.output_dir=hdfs://127.0.0.1:9/runs", "trainer.run_name=r"]) == 2
    err = capsys.readouterr().err
    assert "trainer.output_dir='hdfs://127.0.0.1:9/runs': cannot open this storage (OSError: " in err


@pytest.mark.slow  # the S3 client retries for ~7 s before it gives up
def test_46b_object_store_that_cannot_be_written(capsys, monkeypatch):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no credential lookup on a metadata server
    uri = "s3://bucket/runs?endpoint_override=127.0.0.1:9&scheme=http&region=us-east-1"
    assert main(["train", f"trainer.output_dir={uri}", "trainer.run_name=r"]) == 2
    err = capsys.readouterr().err
    assert "trainer.output_dir: cannot write to s3://bucket/runs/r?endpoint_override=127.0.0.1:9&scheme=http&" \
           "region=us-east-1 (OSError: " in err
