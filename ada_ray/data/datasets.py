"""Datasets: the embedded task or records on disk, turned into tokenized prompts.

Sources: ``embedded`` (chain sums, see embedded_task), ``jsonl``, ``parquet`` and ``hf_disk``
(a ``datasets`` folder made by ``save_to_disk``), with configurable question / answer / id /
difficulty fields. Prompt ids are the record's id field when given, else a hash of the prompt
text, so they are stable across epochs and runs (the difficulty memory relies on it).
Bad records are refused with the file, line and field named; prompts longer than
``data.max_prompt_tokens`` are dropped and counted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ada_ray.algo.types import Prompt
from ada_ray.config import DataConfig
from ada_ray.data import embedded_task


class DataError(ValueError):
    """A dataset problem; the message names the file, line or field."""


@dataclass
class Record:
    question: str
    answer: str
    difficulty: str = ""
    record_id: Optional[str] = None
    where: str = ""  # file:line, for messages
    pass_rate: Optional[float] = None  # offline pass rate (data.pass_rate_field), seeds the difficulty memory
    row: dict = field(default_factory=dict)  # the record as read (prepare-data writes it back out)

    @property
    def prompt_id(self) -> str:
        """The record's id field when given, else a hash of the question: stable across runs."""
        return self.record_id or content_id(self.question)


@dataclass
class PromptSet:
    prompts: list[Prompt]
    dropped_too_long: int = 0
    dropped_duplicates: int = 0
    source: str = ""


def _read_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{i}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{i}: malformed JSON line ({exc.msg} at column {exc.colno})") from None


def _read_parquet(path: Path) -> Iterable[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}:row {i}", row


def _read_hf_disk(path: Path) -> Iterable[tuple[str, Any]]:
    try:
        from datasets import load_from_disk
    except ImportError:
        raise DataError("data.source=hf_disk needs the `datasets` package (pip install datasets)") from None
    ds = load_from_disk(str(path))
    if hasattr(ds, "keys") and not hasattr(ds, "column_names"):  # a DatasetDict
        raise DataError(f"{path}: is a DatasetDict with splits {list(ds.keys())}; point data.train_path at one split")
    for i, row in enumerate(ds):
        yield f"{path}:row {i}", row


READERS = {"jsonl": _read_jsonl, "parquet": _read_parquet, "hf_disk": _read_hf_disk}


def read_records(path: str, cfg: DataConfig) -> list[Record]:
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"dataset not found: {p} (data.source={cfg.source})")
    records = []
    for where, row in READERS[cfg.source](p):
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        for key in (cfg.question_field, cfg.answer_field):
            if key not in row or row[key] is None:
                raise DataError(f"{where}: missing field '{key}' (data.question_field / data.answer_field; "
                                f"the record has {sorted(row)})")
        q, a = row[cfg.question_field], row[cfg.answer_field]
        if not isinstance(q, str) or not q.strip():
            raise DataError(f"{where}: field '{cfg.question_field}' must be a non-empty string, got {q!r:.60}")
        rid = None
        if cfg.id_field:
            if cfg.id_field not in row:
                raise DataError(f"{where}: missing id field '{cfg.id_field}' (data.id_field)")
            rid = str(row[cfg.id_field])
        diff = str(row.get(cfg.difficulty_field, "")) if cfg.difficulty_field else ""
        records.append(Record(q, str(a), diff, rid, where, _pass_rate(row, where, cfg.pass_rate_field), row))
    if not records:
        raise DataError(f"{p}: the dataset is empty")
    return records


def _pass_rate(row: dict, where: str, key: Optional[str]) -> Optional[float]:
    if not key:
        return None
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise DataError(f"{where}: field '{key}' (data.pass_rate_field) must be a number in [0, 1], got {value!r:.60}")
    return float(value)


def render_prompt(question: str, cfg: DataConfig, tokenizer) -> list[int]:
    """Token ids of the prompt: raw text, or the paper's math template (chat template if any)."""
    if cfg.prompt_template == "raw":
        return list(tokenizer(question)["input_ids"])
    user = f"{question} Let's think step by step and output the final answer within \\boxed{{}}."
    if getattr(tokenizer, "chat_template", None):
        msgs = [{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": user}]
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer(f"{cfg.system_prompt}\n\n{user}\n")["input_ids"])


def content_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def to_prompts(records: list[Record], cfg: DataConfig, tokenizer, source: str) -> PromptSet:
    out: list[Prompt] = []
    seen: dict[str, str] = {}
    dropped = dups = 0
    for r in records:
        ids = render_prompt(r.question, cfg, tokenizer)
        if len(ids) > cfg.max_prompt_tokens:
            dropped += 1
            continue
        pid = r.prompt_id
        if pid in seen:
            if r.record_id is not None:
                raise DataError(f"{r.where}: duplicate prompt id {pid!r} (first at {seen[pid]})")
            dups += 1  # the same question twice: keep the first, count the rest
            continue
        seen[pid] = r.where
        out.append(Prompt(pid, r.question, tuple(ids), r.answer, r.difficulty, r.pass_rate))
    if not out:
        raise DataError(f"{source}: no prompt fits data.max_prompt_tokens = {cfg.max_prompt_tokens} "
                        f"({dropped} dropped as too long)")
    return PromptSet(out, dropped, dups, source)


def _embedded_records(items) -> list[Record]:
    return [Record(it.question, it.answer, it.difficulty, it.prompt_id, f"embedded:{it.difficulty}",
                   row={"id": it.prompt_id, "question": it.question, "answer": it.answer, "difficulty": it.difficulty})
            for it in items]


def load_records(cfg: DataConfig) -> tuple[list[Record], Optional[list[Record]]]:
    """(train, eval) records for the config, before tokenization; eval is None when there is none."""
    if cfg.source == "embedded":
        train, evals = embedded_task.make_splits(cfg.levels, cfg.train_per_level, cfg.eval_per_level, cfg.seed,
                                                    cfg.answer_order)
        return _embedded_records(train), (_embedded_records(evals) if evals else None)
    if not cfg.train_path:
        raise DataError(f"data.train_path is required for data.source={cfg.source}")
    return read_records(cfg.train_path, cfg), (read_records(cfg.eval_path, cfg) if cfg.eval_path else None)


def load_splits(cfg: DataConfig, tokenizer) -> tuple[PromptSet, Optional[PromptSet]]:
    """(train, eval) prompt sets for the config; eval is None when there is none."""
    train, evals = load_records(cfg)
    src = "embedded" if cfg.source == "embedded" else None
    tr = to_prompts(train, cfg, tokenizer, f"{src} train" if src else cfg.train_path)
    ev = to_prompts(evals, cfg, tokenizer, f"{src} eval" if src else cfg.eval_path) if evals else None
    return tr, ev
