"""`ada-ray prepare-data`: the paper's offline data preparation (Reinforce-Ada, Sec. 5.1).

Samples ``prepare.samples_per_prompt`` responses per training prompt from the base policy with
vLLM, scores them with the configured verifier, and keeps the prompts whose pass rate is at most
``prepare.max_pass_rate`` with at least ``prepare.min_correct`` correct responses (paper: <= 0.125
"hard", <= 0.313 "standard", at least one correct). The kept records are written as JSONL with
their pass rate, which ``data.pass_rate_field`` turns into the queue's initial difficulty memory.

Resumable: every prompt's score is appended to ``<output>.scores.jsonl`` as soon as its chunk is
done (flushed and synced), and a rerun skips the prompts already scored there. The filtered file
and ``<output>.summary.json`` are written atomically at the end.

A command beside `ada-ray eval` (it samples with an engine, scores with evaluate.py and reports progress
with driver/progress.py), so it sits at the top of the package with cli.py, not in data/, whose rooms
it builds on: data/ imports nothing of the driver.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ada_ray.config import AdaRayConfig
from ada_ray.data.datasets import DataError, Record, load_records, render_prompt
from ada_ray.driver.output_paths import resolve_output_dir


@dataclass(frozen=True)
class Band:
    """Which prompts the filter keeps: pass rate <= max_pass_rate and at least min_correct right."""

    max_pass_rate: float
    min_correct: int

    def keeps(self, num_correct: int, num_samples: int) -> bool:
        return num_correct >= self.min_correct and num_correct / num_samples <= self.max_pass_rate + 1e-12


def output_path(cfg: AdaRayConfig) -> Path:
    if cfg.prepare.output:
        return Path(cfg.prepare.output).expanduser()
    return resolve_output_dir(cfg.trainer.output_dir)[0] / "prepared" / "train.jsonl"


def scores_path(out: Path) -> Path:
    return out.with_name(out.name + ".scores.jsonl")


def read_scores(path: Path, k: int) -> dict[str, int]:
    """prompt id -> correct count, from an earlier (possibly interrupted) run with the same k.
    A torn last line (the process died mid-write) is cut off the file: that prompt is scored again."""
    done: dict[str, int] = {}
    if not path.exists():
        return done
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    good_bytes = 0
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            if not line.endswith("\n"):
                raise json.JSONDecodeError("no end of line", line, len(line))
        except json.JSONDecodeError:
            if i == len(lines):
                with open(path, "r+b") as fh:  # appends start on a clean line
                    fh.truncate(good_bytes)
                break
            raise DataError(f"{path}:{i}: malformed score line; delete the file to start over") from None
        good_bytes += len(line.encode("utf-8"))
        if rec["num_samples"] != k:
            raise DataError(f"{path}:{i}: scored with {rec['num_samples']} samples per prompt, but "
                            f"prepare.samples_per_prompt = {k}; delete the file or set the same k")
        done[rec["prompt_id"]] = int(rec["num_correct"])
    return done


def _append(path: Path, rows: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def output_row(rec: Record, pid: str, num_correct: int, k: int, cfg: AdaRayConfig) -> dict:
    """The record as read, plus what prepare-data measured (and the fields training reads)."""
    row = dict(rec.row) if rec.row else {cfg.data.question_field: rec.question, cfg.data.answer_field: rec.answer}
    row.update({"prompt_id": pid, "pass_rate": num_correct / k, "num_correct": num_correct, "num_samples": k})
    return row


def train_overrides(out: Path, cfg: AdaRayConfig) -> list[str]:
    """The overrides that train on the prepared file with its pass rates as the difficulty memory."""
    d = cfg.data
    ov = ["data.source=jsonl", f"data.train_path={out}", "data.pass_rate_field=pass_rate"]
    if d.source == "embedded":  # the embedded records are written with these field names
        return ov + ["data.id_field=id", "data.difficulty_field=difficulty"]
    ov += [f"data.question_field={d.question_field}", f"data.answer_field={d.answer_field}"]
    ov += [f"data.id_field={d.id_field}"] if d.id_field else []
    ov += [f"data.difficulty_field={d.difficulty_field}"] if d.difficulty_field else []
    return ov


def prepare(cfg: AdaRayConfig, make_engine: Callable, make_scorer: Callable, log=print) -> dict:
    """Run the filter; returns the summary (also written next to the output).

    `make_engine()` returns a generation engine with `.tokenizer` and `.generate(...)` (VLLMEngine);
    `make_scorer()` a SafeScorer. Both are made only if some prompt still needs scoring."""
    from ada_ray.evaluate import count_correct, histogram
    from ada_ray.driver.progress import Progress

    pc = cfg.prepare
    k, band = pc.samples_per_prompt, Band(pc.max_pass_rate, pc.min_correct)
    temperature = cfg.sampler.temperature if pc.temperature is None else pc.temperature
    out = output_path(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    spath = scores_path(out)
    records, _ = load_records(cfg.data)
    done = read_scores(spath, k)
    resumed = len(done)
    t0 = time.time()
    engine = scorer = None
    ids: list[Optional[str]] = []
    todo: list[tuple[Record, str, list[int]]] = []
    tokenizer = None
    too_long = dups = 0
    seen: set[str] = set()
    for rec in records:
        pid = rec.prompt_id
        if pid in seen:
            if rec.record_id is not None:
                raise DataError(f"{rec.where}: duplicate prompt id {pid!r} (data.id_field)")
            dups += 1  # the same question twice: score the first only
            ids.append(None)
            continue
        seen.add(pid)
        ids.append(pid)
        if pid in done:
            continue
        if tokenizer is None:
            engine = make_engine()
            tokenizer = engine.tokenizer
        toks = render_prompt(rec.question, cfg.data, tokenizer)
        if len(toks) > cfg.data.max_prompt_tokens:
            too_long += 1
            continue
        todo.append((rec, pid, toks))
    log(f"prepare-data: {len(records)} records, {resumed} already scored in {spath}, {len(todo)} to score "
        f"(k = {k}, T = {temperature}); keeping pass rate <= {band.max_pass_rate} with >= {band.min_correct} correct")
    if todo:
        scorer = make_scorer()
        bar = Progress(len(todo), cfg.trainer.progress, log=log)
        try:
            for start in range(0, len(todo), pc.chunk_prompts):
                chunk = todo[start:start + pc.chunk_prompts]
                correct, _ = count_correct(engine, [t for _, _, t in chunk], [rec.answer for rec, _, _ in chunk], k,
                                           temperature, cfg.trainer.seed, start, scorer, cfg.algo.positive_threshold)
                rows = []
                for (_, pid, _), c in zip(chunk, correct):
                    done[pid] = c
                    rows.append({"prompt_id": pid, "num_correct": c, "num_samples": k})
                _append(spath, rows)
                n = start + len(chunk)
                bar.update(n, {}, f"prepare-data {n}/{len(todo)} prompts scored")
        finally:
            bar.close()
            scorer.close()
    kept_rows, rates = [], []
    for rec, pid in zip(records, ids):
        if pid is None or pid not in done:
            continue
        rates.append(done[pid] / k)
        if band.keeps(done[pid], k):
            kept_rows.append(output_row(rec, pid, done[pid], k, cfg))
    if not kept_rows:
        raise DataError(f"prepare-data: no prompt of {len(rates)} scored has a pass rate <= {band.max_pass_rate} "
                        f"with >= {band.min_correct} correct (see {spath}); widen prepare.max_pass_rate or "
                        "lower prepare.min_correct")
    _write_atomic(out, "".join(json.dumps(r, default=str) + "\n" for r in kept_rows))
    summary = {
        "output": str(out), "scores": str(spath), "records": len(records), "scored": len(rates),
        "kept": len(kept_rows), "kept_share": len(kept_rows) / len(rates), "resumed": resumed,
        "dropped_too_long": too_long, "dropped_duplicates": dups, "samples_per_prompt": k,
        "temperature": temperature, "max_pass_rate": band.max_pass_rate, "min_correct": band.min_correct,
        "mean_pass_rate": sum(rates) / len(rates), "histogram": histogram(rates),
        "seconds": round(time.time() - t0, 1), "train_overrides": train_overrides(out, cfg),
    }
    _write_atomic(out.with_name(out.name + ".summary.json"), json.dumps(summary, indent=2))
    return summary


def format_summary(s: dict) -> str:
    hist = "  ".join(f"{b}: {v:.3f}" for b, v in s["histogram"].items())
    return (f"kept {s['kept']} of {s['scored']} prompts ({s['kept_share']:.1%}) with pass rate <= "
            f"{s['max_pass_rate']} and >= {s['min_correct']} correct of {s['samples_per_prompt']}; "
            f"mean pass rate {s['mean_pass_rate']:.3f}; {s['seconds']} s\n"
            f"pass-rate histogram: {hist}\n"
            f"written: {s['output']}\n"
            f"train on it: ada-ray train [CONFIG] " + " ".join(s["train_overrides"]))
