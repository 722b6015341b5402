"""The tokenized training prompts as an Arrow IPC file: written chunk by chunk, read by row.

A training set of a million prompts never sits in one Python list: the driver streams records into
this file (`PromptTableWriter`, one record batch at a time), and the PromptQueue opens it memory-mapped
(`PromptTable`): per prompt it keeps only the id and the difficulty memory, while token ids, text and
answer stay in the file (the page cache, not the queue's heap) and are read for the prompts being
admitted into a cohort. A `PromptTable` pickles as its path, so handing it to an actor sends a few
bytes; the actor must run on a node that sees the path (the driver pins the PromptQueue to its node).

Columns: prompt_id, text, token_ids (int32 list), answer, difficulty, prior_pass_rate (null: none).
`PromptSet` (a split: its prompts, as a list or a PromptTable, and what was dropped building it) lives
here so that datasets.py and train_table.py, which both make one, need not import each other.
"""

from __future__ import annotations

import bisect
import itertools
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from ada_ray.algo.types import Prompt

SCHEMA = pa.schema([("prompt_id", pa.string()), ("text", pa.string()), ("token_ids", pa.list_(pa.int32())),
                    ("answer", pa.string()), ("difficulty", pa.string()), ("prior_pass_rate", pa.float64())])
CHUNK = 8192  # prompts per record batch


@dataclass
class PromptSet:
    prompts: Any  # list[Prompt], or a PromptTable for a streamed training split
    dropped_too_long: int = 0
    dropped_duplicates: int = 0
    source: str = ""


def _batch(prompts: Sequence[Prompt]) -> pa.RecordBatch:
    return pa.record_batch([
        pa.array([p.prompt_id for p in prompts], pa.string()),
        pa.array([p.text for p in prompts], pa.string()),
        pa.array([list(p.token_ids) for p in prompts], pa.list_(pa.int32())),
        pa.array([p.answer for p in prompts], pa.string()),
        pa.array([p.difficulty for p in prompts], pa.string()),
        pa.array([p.prior_pass_rate for p in prompts], pa.float64()),
    ], schema=SCHEMA)


def _prompts(batch: pa.RecordBatch) -> list[Prompt]:
    """The Prompts of a record batch: `_batch` read back."""
    c = batch.to_pydict()
    return [Prompt(*row[:2], tuple(row[2]), *row[3:]) for row in zip(
        c["prompt_id"], c["text"], c["token_ids"], c["answer"], c["difficulty"], c["prior_pass_rate"])]


class PromptTableWriter:
    """Append prompts; they reach the file a record batch at a time. Written beside `path` under a
    temporary name and renamed into place on close, so a reader never sees half a table."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own: two runs building the same cached table at once do not write one file
        self.tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        self.sink = pa.OSFile(str(self.tmp), "wb")
        self.writer = pa.ipc.new_file(self.sink, SCHEMA)
        self.pending: list[Prompt] = []
        self.rows = 0

    def add(self, prompt: Prompt) -> None:
        self.pending.append(prompt)
        if len(self.pending) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_batch(_batch(self.pending))
            self.rows += len(self.pending)
            self.pending = []

    def close(self) -> "PromptTable":
        self._flush()
        self.writer.close()
        self.sink.close()
        self.tmp.replace(self.path)
        return PromptTable(self.path)

    def abort(self) -> None:
        self.writer.close()
        self.sink.close()
        self.tmp.unlink(missing_ok=True)


def write_prompt_table(path: Path, prompts: Iterable[Prompt]) -> "PromptTable":
    w = PromptTableWriter(path)
    try:
        for p in prompts:
            w.add(p)
    except BaseException:
        w.abort()
        raise
    return w.close()


class PromptTable:
    """Read access to a prompt table file, by id or in order; the file is opened on first use."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._table: Optional[pa.Table] = None
        self._rows: Optional[dict[str, int]] = None
        self._ids: Optional[list[str]] = None
        self._batches: list[pa.RecordBatch] = []
        self._starts: Optional[list[int]] = None  # first row of each record batch, then the row count

    @classmethod
    def open(cls, path: Path) -> "PromptTable":
        t = cls(path)
        t.table  # noqa: B018 - check now that it opens and has our schema
        return t

    def __reduce__(self):  # pickles as its path: actors open the file themselves
        return (PromptTable, (str(self.path),))

    @property
    def table(self) -> pa.Table:
        if self._table is None:
            try:
                reader = pa.ipc.open_file(pa.memory_map(str(self.path), "r"))
            except (OSError, pa.ArrowInvalid) as exc:
                raise FileNotFoundError(f"prompt table {self.path} cannot be opened ({exc})") from None
            if not reader.schema.equals(SCHEMA):
                raise ValueError(f"prompt table {self.path} has columns {reader.schema.names}, "
                                 f"expected {SCHEMA.names}: it was written by another version; delete it")
            self._table = reader.read_all()  # zero-copy over the mapping
        return self._table

    def __len__(self) -> int:
        return self.table.num_rows

    def ids(self) -> list[str]:
        """Every prompt id in file order (one list, built once and shared by every caller)."""
        if self._ids is None:
            self._ids = self.table.column("prompt_id").to_pylist()
        return self._ids

    def _row_of(self, prompt_id: str) -> int:
        if self._rows is None:
            self._rows = {pid: i for i, pid in enumerate(self.ids())}
        return self._rows[prompt_id]

    def __contains__(self, prompt_id: str) -> bool:
        try:
            self._row_of(prompt_id)
        except KeyError:
            return False
        return True

    def get(self, prompt_id: str) -> Prompt:
        return self.rows([self._row_of(prompt_id)])[0]

    def get_many(self, prompt_ids: Sequence[str]) -> list[Prompt]:
        return self.rows([self._row_of(pid) for pid in prompt_ids])

    def rows(self, indices: Sequence[int]) -> list[Prompt]:
        """The prompts at these row numbers, in order: one `take` per record batch they fall in (a
        `take` over the whole table would first copy every column into memory)."""
        if self._starts is None:
            self._batches = self.table.to_batches()
            self._starts = list(itertools.accumulate((b.num_rows for b in self._batches), initial=0))
        by_batch: dict[int, list[tuple[int, int]]] = {}
        for pos, i in enumerate(indices):
            if not 0 <= i < self._starts[-1]:
                raise IndexError(f"row {i} is outside prompt table {self.path} ({self._starts[-1]} rows)")
            b = bisect.bisect_right(self._starts, i) - 1
            by_batch.setdefault(b, []).append((pos, i - self._starts[b]))
        out: list = [None] * len(indices)
        for b, wanted in by_batch.items():
            taken = _prompts(self._batches[b].take(pa.array([r for _, r in wanted], pa.int64())))
            for (pos, _), prompt in zip(wanted, taken):
                out[pos] = prompt
        return out

    def __iter__(self) -> Iterator[Prompt]:
        for batch in self.table.to_batches():
            yield from _prompts(batch)

    def priors(self) -> Iterator[tuple[str, float]]:
        """(prompt id, offline pass rate) of every prompt that has one."""
        for batch in self.table.select(["prompt_id", "prior_pass_rate"]).to_batches(CHUNK):
            ids, rates = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            yield from ((i, r) for i, r in zip(ids, rates) if r is not None)


def synthetic_table(path: Path, n: int, tokens: int, pass_rate: Callable[[str], float]) -> PromptTable:
    """`n` made-up prompts of `tokens` token ids, each with an offline pass rate (for benchmarks)."""
    return write_prompt_table(path, (Prompt(f"s{i:09d}", f"synthetic question {i}", tuple(
        (i * 31 + j) % 997 + 3 for j in range(tokens)), str(i % 100), "synthetic", pass_rate(f"s{i:09d}"))
        for i in range(n)))
