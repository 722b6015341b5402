"""The training split streamed into a cached prompt table: same prompts as the in-memory path,
bounded memory for de-duplication, a cache that follows the data and the tokenizer."""

from __future__ import annotations

import json
import os

import pytest

from ada_ray.config import DataConfig
from ada_ray.data import prompt_builder
from ada_ray.data.datasets import DataError, load_splits
from ada_ray.data.prompt_builder import SeenIds
from ada_ray.data.prompt_table import PromptTable


class CountingTok:
    """One id per character; counts the texts it tokenizes; takes one text or a list."""

    chat_template = None

    def __init__(self):
        self.texts = 0

    def get_vocab(self):
        return {chr(c): c for c in range(32, 127)}

    def __call__(self, text):
        if isinstance(text, list):
            return {"input_ids": [self(t)["input_ids"] for t in text]}
        self.texts += 1
        return {"input_ids": [1] + [ord(c) % 50 for c in text]}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n):
    return [{"question": f"{i}+{i}=", "answer": str(2 * i)} for i in range(n)]


def cfg(path, **kw):
    return DataConfig(source="jsonl", train_path=str(path), max_prompt_tokens=kw.pop("max_prompt_tokens", 64), **kw)


def test_seen_ids_finds_every_id_across_merges():
    s = SeenIds(merge_every=3)
    for i in range(10):
        assert s.answer_of(i * 7919) is None
        s.add(i * 7919, i)
    assert len(s) == 10 and len(s.recent) == 1  # three merges into the sorted arrays
    assert [s.answer_of(i * 7919) for i in range(10)] == list(range(10))
    assert s.answer_of(5) is None


def test_table_holds_the_same_prompts_as_the_list(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", rows(50) + [rows(1)[0]] + [{"question": "9" * 80, "answer": "1"}])
    in_memory, _ = load_splits(cfg(data), CountingTok())
    table, _ = load_splits(cfg(data), CountingTok(), table_cache=tmp_path / "cache", log=lambda m: None)
    assert isinstance(table.prompts, PromptTable)
    assert list(table.prompts) == in_memory.prompts and len(table.prompts) == 50
    assert (table.dropped_duplicates, table.dropped_too_long) == (in_memory.dropped_duplicates,
                                                                  in_memory.dropped_too_long) == (1, 1)


def test_second_run_reuses_the_table_and_a_changed_file_rebuilds_it(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", rows(20) + [rows(1)[0]])
    tok = CountingTok()
    first, _ = load_splits(cfg(data), tok, table_cache=tmp_path / "c", log=lambda m: None)
    assert tok.texts == 21
    again, _ = load_splits(cfg(data), tok, table_cache=tmp_path / "c", log=lambda m: None)
    assert tok.texts == 21 and again.prompts.path == first.prompts.path  # not tokenized again
    assert again.dropped_duplicates == 1  # the summary travels with the cached table
    write_jsonl(data, rows(25))
    os.utime(data, ns=(1, 1))
    changed, _ = load_splits(cfg(data), tok, table_cache=tmp_path / "c", log=lambda m: None)
    assert len(changed.prompts) == 25 and changed.prompts.path != first.prompts.path
    other_limit, _ = load_splits(cfg(data, max_prompt_tokens=5), tok, table_cache=tmp_path / "c", log=lambda m: None)
    assert other_limit.prompts.path != changed.prompts.path and len(other_limit.prompts) == 10  # "0+0=" .. "9+9=": 5 ids


def test_a_conflict_far_from_its_first_occurrence_names_both_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_builder, "CHUNK", 4)
    data = write_jsonl(tmp_path / "train.jsonl", rows(30) + [{"question": "3+3=", "answer": "7"}])
    with pytest.raises(DataError, match=rf"train.jsonl:31: the same question as .*train.jsonl:4 with another "
                                        r"answer \('7' here, '6' there\)"):
        load_splits(cfg(data), CountingTok(), table_cache=tmp_path / "c", log=lambda m: None)
    assert not list((tmp_path / "c" / "prompt_tables").glob("*"))  # nothing half-written


def test_parquet_streams_by_record_batch(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows(9000)), path, row_group_size=1000)

    def whole_file(*a, **k):
        raise AssertionError("the whole file was read at once")

    monkeypatch.setattr(pq, "read_table", whole_file)
    train, _ = load_splits(DataConfig(source="parquet", train_path=str(path)), CountingTok(),
                           table_cache=tmp_path / "c", log=lambda m: None)
    assert len(train.prompts) == 9000 and train.prompts.get(train.prompts.ids()[-1]).answer == str(2 * 8999)
