"""The training split as a prompt table file: streamed from the dataset once, then cached.

`load_train_table` reads the training records one at a time (pyarrow record batches for Parquet,
line by line for JSONL, `datasets`' memory-mapped rows for hf_disk), tokenizes them in chunks and
appends them to an Arrow file, so the driver's memory does not grow with the dataset (16 bytes a
prompt for de-duplication). The file is cached under ``<cache>/prompt_tables/<key>.arrow`` with a
``<key>.json`` summary (rows, dropped counts), where the key hashes everything that shapes the
prompts: the data settings, the dataset file (path, size, modification time) and the tokenizer (its
vocabulary and chat template). A second run on the same data and tokenizer starts without
tokenizing again; a changed file or setting builds a new table.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from ada_ray.config import DataConfig
from ada_ray.data.prompt_builder import PromptBuilder
from ada_ray.data.prompt_table import PromptSet, PromptTable, PromptTableWriter

TABLE_VERSION = 1  # bump when the table's columns or the tokenization rules change

# settings that only concern the eval split, scoring or the embedded eval pool: not part of the key
_NOT_IN_KEY = ("eval_path", "eval_per_level", "reward", "reward_timeout_s")


def _file_stamp(path: str) -> dict:
    p = Path(path).expanduser().resolve()
    files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
    return {"path": str(p), "files": [(str(f.relative_to(p)) if p.is_dir() else f.name, f.stat().st_size,
                                       f.stat().st_mtime_ns) for f in files]}


def _tokenizer_stamp(tokenizer) -> str:
    h = hashlib.sha1(type(tokenizer).__name__.encode())
    try:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    except Exception:  # noqa: BLE001 - a stand-in tokenizer without a vocabulary
        h.update(repr(tokenizer).encode())
    h.update(str(getattr(tokenizer, "chat_template", None)).encode())
    return h.hexdigest()


def table_key(cfg: DataConfig, tokenizer) -> str:
    data = {k: v for k, v in asdict(cfg).items() if k not in _NOT_IN_KEY}
    stamp = _file_stamp(cfg.train_path) if cfg.source != "embedded" else None
    blob = json.dumps({"v": TABLE_VERSION, "data": data, "file": stamp, "tok": _tokenizer_stamp(tokenizer)},
                      sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def load_train_table(cfg: DataConfig, tokenizer, cache: Path, records, source: str, log=print):
    """The training split as a PromptSet whose prompts are a PromptTable; `records` is a function
    returning a fresh iterator over the validated training records."""
    folder = Path(cache) / "prompt_tables"
    key = table_key(cfg, tokenizer)
    path, summary_path = folder / f"{key}.arrow", folder / f"{key}.json"
    if path.is_file() and summary_path.is_file():
        s = json.loads(summary_path.read_text())
        table = PromptTable.open(path)
        if len(table) == s["rows"]:
            return PromptSet(table, s["dropped_too_long"], s["dropped_duplicates"], source)
    builder = PromptBuilder(cfg, tokenizer, source, records)
    writer = PromptTableWriter(path)
    try:
        for prompt in builder.add_all(records()):
            writer.add(prompt)
        builder.finish()
    except BaseException:
        writer.abort()
        raise
    table = writer.close()
    tmp = summary_path.with_name(f"{summary_path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"rows": len(table), "dropped_too_long": builder.dropped_too_long,
                               "dropped_duplicates": builder.dropped_duplicates, "source": source}))
    os.replace(tmp, summary_path)
    log(f"tokenized {len(table)} training prompts into {path}")
    return PromptSet(table, builder.dropped_too_long, builder.dropped_duplicates, source)
