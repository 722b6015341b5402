"""Datasets: the embedded task or records on disk, turned into tokenized prompts.

Sources: ``embedded`` (chain sums, see embedded_task), ``jsonl``, ``parquet`` and ``hf_disk``
(a ``datasets`` folder made by ``save_to_disk``), with configurable question / answer / id /
difficulty fields. Prompt ids are the record's id field when given, else a hash of the prompt
text, so they are stable across epochs and runs (the difficulty memory relies on it).
JSONL is read as pandas / datasets read it: UTF-8 with or without a byte-order mark, any line
ending, gzip / bz2 / xz compressed or not. Numeric answers are written out as text and Unicode
digits in answers read as ASCII ones. Bad records are refused with the file, line and field named
(docs/BAD_INPUTS.md); prompts longer than ``data.max_prompt_tokens`` are dropped and counted.
"""

from __future__ import annotations

import json
import math
import numbers
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from ada_ray.algo.types import Prompt
from ada_ray.config import DataConfig
from ada_ray.data import embedded_task
from ada_ray.data.prompt_builder import DataError, PromptBuilder, content_id, render_prompt  # noqa: F401 (re-exported)
from ada_ray.data.prompt_table import PromptSet  # noqa: F401 (re-exported)


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


# First bytes of compressed files read transparently (by content, whatever the file name), and of
# formats that are refused with a hint.
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))
_REFUSED = ((b"PAR1", "is a Parquet file; set data.source=parquet"),
            (b"PK\x03\x04", "is a zip archive; unzip it and point data.train_path / data.eval_path at the .jsonl file"),
            (b"\x28\xb5\x2f\xfd", "is zstd-compressed; decompress it first (zstd -d), or gzip it (read as is)"))
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, kept by errors="surrogateescape"


def _open_text(path: Path):
    """A text handle on a JSONL file as pandas / datasets read it: UTF-8 with or without a byte-order
    mark (UTF-16 when it has a UTF-16 one), any line ending, gzip / bz2 / xz compressed or not."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    for magic, why in _REFUSED:
        if head.startswith(magic):
            raise DataError(f"{path}: {why}")
    encoding = "utf-16" if head.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    for magic, module in _COMPRESSED:
        if head.startswith(magic):
            import importlib

            return importlib.import_module(module).open(path, "rt", encoding=encoding, errors="surrogateescape")
    return open(path, encoding=encoding, errors="surrogateescape")


def _read_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    i = 0
    try:
        with _open_text(path) as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                bad = _NOT_UTF8.search(line)
                if bad:
                    raise DataError(f"{path}:{i}: not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02x} at column "
                                    f"{bad.start() + 1}); save the file as UTF-8")
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    hint = ("; the file looks like one pretty-printed JSON document, but data.source=jsonl expects "
                            "one JSON object per line" if i == 1 and line.strip() in ("[", "{") else "")
                    raise DataError(f"{path}:{i}: malformed JSON line ({exc.msg} at column {exc.colno}){hint}") from None
                yield f"{path}:{i}", value
    except (EOFError, OSError, UnicodeDecodeError) as exc:  # unreadable; a torn gzip / bz2 / xz stream; bad UTF-16
        raise DataError(f"{path}: cannot read the file{f' after line {i}' if i else ''} ({exc})") from None


def _read_parquet(path: Path) -> Iterable[tuple[str, Any]]:
    """Rows of a Parquet file, one record batch at a time (a million-row file is never read whole)."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
        with open(path, "rb") as fh:
            looks_json = fh.read(1) in (b"{", b"[")
        hint = "; it looks like JSON: set data.source=jsonl" if looks_json else ""
        raise DataError(f"{path}: cannot read as Parquet ({exc}){hint}") from None
    i = 0
    for batch in pf.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            yield f"{path}:row {i}", row
            i += 1


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


def _columns(path: Path, source: str) -> Optional[list[str]]:
    """The column names of a Parquet file (read from its footer, no rows), else None."""
    if source != "parquet":
        return None
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - not Parquet: _read_parquet says so
        return None


def _check_path(p: Path, source: str) -> None:
    """A file for jsonl / parquet, a folder for hf_disk; else a message saying what to point at."""
    if source == "hf_disk":
        if not p.is_dir():
            raise DataError(f"{p}: is a file, but data.source=hf_disk expects a folder made by datasets' save_to_disk "
                            "(for a .jsonl / .parquet file set data.source=jsonl / parquet)")
        return
    if p.is_dir():
        names = sorted(c.name for c in p.iterdir())
        if {"dataset_info.json", "state.json"} & set(names):
            hint = "it looks like a datasets save_to_disk folder: set data.source=hf_disk"
        else:
            ext = (".jsonl", ".jsonl.gz", ".json") if source == "jsonl" else (".parquet",)
            files = [n for n in names if n.endswith(ext)]
            hint = (f"point the path at one of its files: {', '.join(files[:8])}{', ...' if len(files) > 8 else ''}"
                    if files else f"it holds no {' / '.join(ext)} file")
        raise DataError(f"{p}: is a directory, but data.source={source} reads one file; {hint}")


READERS = {"jsonl": _read_jsonl, "parquet": _read_parquet, "hf_disk": _read_hf_disk}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    for kind, name in ((dict, "an object"), (list, "an array"), (str, "a string"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, numbers.Number) else type(value).__name__


def _names(keys: Iterable[str]) -> str:
    names = sorted(map(str, keys))
    return str(names) if len(names) <= 20 else f"{names[:20]} ... ({len(names)} in all)"


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))  # NaN: pandas' missing value


def _null(where: str, key: str, setting: str) -> DataError:
    return DataError(f"{where}: field '{key}' ({setting}) is null (a missing value); fill it in or drop the record")


def ascii_digits(text: str) -> str:
    """Unicode decimal digits (full-width \uff14\uff12, Arabic-Indic \u0664\u0662, Devanagari, ...) as ASCII 0-9;
    everything else, superscripts included, as written."""
    if text.isascii():
        return text
    return "".join(str(unicodedata.decimal(c)) if c.isdecimal() and not c.isascii() else c for c in text)


def _answer_text(value: Any, where: str, key: str) -> str:
    """The reference answer as text: numbers are written out (an integral float such as 4.0, which
    pandas makes of an int column with gaps, as 4), Unicode digits as ASCII ones."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, numbers.Number) and not isinstance(value, (bool, complex)):
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"{where}: field '{key}' (data.answer_field) must be a finite number, got {value}")
        text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    else:
        raise DataError(f"{where}: field '{key}' (data.answer_field) must be a string or a number, "
                        f"got {_json_type(value)} {value!r:.60}")
    text = ascii_digits(text)
    if not text.strip():
        raise DataError(f"{where}: field '{key}' (data.answer_field) must be a non-empty answer, got {value!r}")
    return text


def _record(row: Any, where: str, cfg: DataConfig) -> Record:
    if not isinstance(row, dict):
        hint = "; data.source=jsonl expects one JSON object per line" if isinstance(row, list) else ""
        raise DataError(f"{where}: expected a JSON object (one record), got {_json_type(row)}{hint}")
    for key, setting in ((cfg.question_field, "data.question_field"), (cfg.answer_field, "data.answer_field")):
        if key not in row:
            raise DataError(f"{where}: missing field '{key}' (data.question_field / data.answer_field; "
                            f"the record has {_names(row)})")
        if _is_null(row[key]):
            raise _null(where, key, setting)
    q = row[cfg.question_field]
    if not isinstance(q, str) or not q.strip():
        raise DataError(f"{where}: field '{cfg.question_field}' must be a non-empty string, got {q!r:.60}")
    answer = _answer_text(row[cfg.answer_field], where, cfg.answer_field)
    rid = None
    if cfg.id_field:
        if cfg.id_field not in row:
            raise DataError(f"{where}: missing id field '{cfg.id_field}' (data.id_field)")
        if _is_null(row[cfg.id_field]):
            raise _null(where, cfg.id_field, "data.id_field")
        rid = str(row[cfg.id_field])
        if not rid.strip():
            raise DataError(f"{where}: field '{cfg.id_field}' (data.id_field) is empty")
    diff = row.get(cfg.difficulty_field) if cfg.difficulty_field else None
    diff = "" if _is_null(diff) else str(diff)
    return Record(q, answer, diff, rid, where, _pass_rate(row, where, cfg.pass_rate_field), row)


def iter_records(path: str, cfg: DataConfig) -> Iterator[Record]:
    """The validated records of a dataset file, streamed (memory does not grow with the file)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"dataset not found: {p} (data.source={cfg.source})")
    _check_path(p, cfg.source)
    columns = _columns(p, cfg.source)
    if columns is not None:  # Parquet: the missing column named once, not at row 0
        needed = [(cfg.question_field, "data.question_field"), (cfg.answer_field, "data.answer_field")]
        needed += [(k, s) for k, s in ((cfg.id_field, "data.id_field"), (cfg.pass_rate_field, "data.pass_rate_field")) if k]
        for key, setting in needed:
            if key not in columns:
                raise DataError(f"{p}: no column '{key}' ({setting}); the file has columns {_names(columns)}")
    empty = True
    for where, row in READERS[cfg.source](p):
        empty = False
        yield _record(row, where, cfg)
    if empty:
        raise DataError(f"{p}: the dataset is empty")


def read_records(path: str, cfg: DataConfig) -> list[Record]:
    return list(iter_records(path, cfg))


def _pass_rate(row: dict, where: str, key: Optional[str]) -> Optional[float]:
    if not key:
        return None
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise DataError(f"{where}: field '{key}' (data.pass_rate_field) must be a number in [0, 1], got {value!r:.60}")
    return float(value)


def to_prompts(records: list[Record], cfg: DataConfig, tokenizer, source: str) -> PromptSet:
    """The records' prompts, in a list (an eval split, a small training set)."""
    b = PromptBuilder(cfg, tokenizer, source, lambda: records)
    prompts = list(b.add_all(records))
    b.finish()
    return PromptSet(prompts, b.dropped_too_long, b.dropped_duplicates, source)


def check_batch(train: PromptSet, batch_prompts: int) -> None:
    """A step trains `batch_prompts` different prompts: refuse a training set with fewer."""
    n = len(train.prompts)
    if n < batch_prompts:
        why = [f"{k} {what}" for k, what in ((train.dropped_duplicates, "duplicates"),
                                              (train.dropped_too_long, "longer than data.max_prompt_tokens")) if k]
        raise DataError(f"{train.source}: {n} unique prompt{'s' if n != 1 else ''}"
                        + (f" (after dropping {' and '.join(why)})" if why else "")
                        + f", fewer than trainer.batch_prompts = {batch_prompts}: each step trains "
                        f"{batch_prompts} different prompts; add prompts or lower trainer.batch_prompts")


def _embedded_records(items) -> list[Record]:
    return [Record(it.question, it.answer, it.difficulty, it.prompt_id, f"embedded:{it.difficulty}",
                   row={"id": it.prompt_id, "question": it.question, "answer": it.answer, "difficulty": it.difficulty})
            for it in items]


def _split_sources(cfg: DataConfig) -> tuple[Callable[[], Iterable[Record]], Optional[list[Record]], str, str]:
    """(a function giving the training records afresh - streamed from a file -, the eval records or None,
    the names of both splits for messages)."""
    if cfg.source == "embedded":
        train, evals = embedded_task.make_splits(cfg.levels, cfg.train_per_level, cfg.eval_per_level, cfg.seed,
                                                    cfg.answer_order)
        train_records = _embedded_records(train)
        return (lambda: train_records), (_embedded_records(evals) if evals else None), "embedded train", "embedded eval"
    if not cfg.train_path:
        raise DataError(f"data.train_path is required for data.source={cfg.source}")
    evals = read_records(cfg.eval_path, cfg) if cfg.eval_path else None
    return (lambda: iter_records(cfg.train_path, cfg)), evals, cfg.train_path, cfg.eval_path or ""


def load_records(cfg: DataConfig) -> tuple[list[Record], Optional[list[Record]]]:
    """(train, eval) records for the config, before tokenization; eval is None when there is none."""
    train, evals, _, _ = _split_sources(cfg)
    return list(train()), evals


def load_splits(cfg: DataConfig, tokenizer, table_cache: Optional[Path] = None,
                log=print) -> tuple[PromptSet, Optional[PromptSet]]:
    """(train, eval) prompt sets for the config; eval is None when there is none. With `table_cache`,
    the training split is streamed into a cached prompt table (data.train_table) instead of a list."""
    records, eval_records, tr_src, ev_src = _split_sources(cfg)
    if table_cache is not None:
        from ada_ray.data.train_table import load_train_table

        tr = load_train_table(cfg, tokenizer, table_cache, records, tr_src, log)
    else:
        tr = to_prompts(list(records()), cfg, tokenizer, tr_src)
    ev = to_prompts(eval_records, cfg, tokenizer, ev_src) if eval_records else None
    return tr, ev
