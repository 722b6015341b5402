"""The prompt table file: written in chunks, read by id and by row without copying the table."""

from __future__ import annotations

import pickle

import pytest

from ada_ray.algo.prompt_source import PromptSource, as_source
from ada_ray.algo.types import Prompt
from ada_ray.data import prompt_table
from ada_ray.data.prompt_table import PromptTable, PromptTableWriter, synthetic_table, write_prompt_table


def prompts(n: int) -> list[Prompt]:
    return [Prompt(f"id{i}", f"{i}+1=", tuple(range(i % 5 + 1)), str(i + 1), f"L{i % 3}",
                   None if i % 2 else i / (n + 1)) for i in range(n)]


def test_round_trip_by_id_row_and_order(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_table, "CHUNK", 4)  # several record batches
    ps = prompts(11)
    t = write_prompt_table(tmp_path / "t.arrow", ps)
    assert len(t) == 11 and len(t.table.to_batches()) == 3
    assert t.ids() == [p.prompt_id for p in ps]
    assert list(t) == ps
    assert t.get("id9") == ps[9] and t.rows([10, 0, 4, 5]) == [ps[10], ps[0], ps[4], ps[5]]
    assert t.get_many(["id7", "id1", "id8"]) == [ps[7], ps[1], ps[8]]
    assert "id3" in t and "nope" not in t
    assert list(t.priors()) == [(p.prompt_id, p.prior_pass_rate) for p in ps if p.prior_pass_rate is not None]
    with pytest.raises(IndexError, match="row 11 is outside"):
        t.rows([11])
    assert isinstance(t, PromptSource) and as_source(t) is t


def test_pickles_as_its_path(tmp_path):
    t = write_prompt_table(tmp_path / "t.arrow", prompts(3))
    t.ids()  # opened and indexed here ...
    blob = pickle.dumps(t)
    assert len(blob) < 200  # ... but only the path travels
    back = pickle.loads(blob)
    assert back.path == t.path and back.get("id2") == prompts(3)[2]


def test_reading_rows_copies_nothing(tmp_path):
    t = synthetic_table(tmp_path / "s.arrow", 20000, 16, lambda pid: 0.25)
    before = t.table.nbytes
    t.rows([19999, 5, 12345])
    import pyarrow as pa

    assert pa.total_allocated_bytes() < before / 10  # the table is a mapping of the file, rows are slices


def test_a_failed_write_leaves_no_table(tmp_path):
    def bad():
        yield prompts(1)[0]
        raise RuntimeError("tokenizer died")

    with pytest.raises(RuntimeError):
        write_prompt_table(tmp_path / "t.arrow", bad())
    assert list(tmp_path.iterdir()) == []


def test_unreadable_or_foreign_files_are_refused_by_name(tmp_path):
    junk = tmp_path / "junk.arrow"
    junk.write_text("not arrow")
    with pytest.raises(FileNotFoundError, match="junk.arrow cannot be opened"):
        PromptTable.open(junk)
    import pyarrow as pa

    other = tmp_path / "other.arrow"
    with pa.ipc.new_file(str(other), pa.schema([("x", pa.int32())])) as w:
        w.write_batch(pa.record_batch([pa.array([1], pa.int32())], names=["x"]))
    with pytest.raises(ValueError, match=r"has columns \['x'\]"):
        PromptTable.open(other)


def test_writer_counts_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_table, "CHUNK", 2)
    w = PromptTableWriter(tmp_path / "t.arrow")
    for p in prompts(5):
        w.add(p)
    assert w.rows == 4  # two full chunks written, one prompt pending
    assert len(w.close()) == 5


def test_the_scheduler_over_a_table_leases_what_it_leases_over_the_list(tmp_path):
    from ada_ray.algo.scheduler import WorkScheduler
    from ada_ray.config import AlgoConfig

    ps = prompts(40)
    table = write_prompt_table(tmp_path / "t.arrow", ps)
    kw = dict(batch_prompts=6, max_staleness=1, seed=5, prompt_order="hardest_first")
    algo = AlgoConfig(name="ada_seq_balance", prior_weight=4)
    assert WorkScheduler(table, algo, **kw).lease("s", 100, 0.0) == WorkScheduler(ps, algo, **kw).lease("s", 100, 0.0)
