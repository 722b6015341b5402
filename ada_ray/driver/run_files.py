"""The run directory's own files, written by the driver: config.yaml, the audit of which prompts
each step trained (trained_prompts.jsonl), each eval's per-prompt counts (eval_per_prompt.jsonl),
the final work accounting (accounting.json), and trimming them back to a step on resume.

metrics.jsonl belongs to the Tracker; checkpoints to driver/checkpoint.py. Open with ``with``:
the trained-prompts log stays open (append, flushed per line) until the run ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Optional

# per-step logs and which rows a resume at step s keeps (trained_prompts rows are the step being trained)
STEP_LOGS = {"metrics.jsonl": lambda row, s: row["step"] <= s,
             "trained_prompts.jsonl": lambda row, s: row["step"] < s,
             "eval_per_prompt.jsonl": lambda row, s: row["step"] <= s}


def truncate_logs(run_dir: Path, step: int) -> None:
    """A resume at `step` redoes what came after it: drop those lines from the run's logs."""
    for name, keep in STEP_LOGS.items():
        p = Path(run_dir) / name
        if p.is_file():
            rows = [line for line in p.read_text().splitlines() if line.strip() and keep(json.loads(line), step)]
            p.write_text("".join(r + "\n" for r in rows))


class RunFiles:
    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self._trained: Optional[IO[str]] = None

    def __enter__(self) -> "RunFiles":
        self.dir.mkdir(parents=True, exist_ok=True)
        self._trained = open(self.dir / "trained_prompts.jsonl", "a")  # O_APPEND: a truncate below is safe
        return self

    def __exit__(self, *exc) -> None:
        if self._trained is not None:
            self._trained.close()
            self._trained = None

    def write_config(self, yaml_text: str) -> Path:
        path = self.dir / "config.yaml"
        path.write_text(yaml_text)
        return path

    def truncate(self, step: int) -> None:
        truncate_logs(self.dir, step)

    def record_trained(self, step: int, cohort) -> None:
        """Audit line: the prompts step `step` trains on and those DAPO dropped; per trained prompt its
        pool size, pool positives, rounds and whether the exit rule fired (where the samples went)."""
        assert self._trained is not None, "RunFiles used outside its `with` block"
        gs = cohort.groups
        self._trained.write(json.dumps({"step": step, "prompts": [g.prompt_id for g in gs],
                                        "dropped": [g.prompt_id for g in cohort.dropped],
                                        "pool": [g.pool_size for g in gs], "pos": [g.pool_positives for g in gs],
                                        "rounds": [g.rounds for g in gs], "fired": [g.exit_fired for g in gs],
                                        "skipped": cohort.skipped}) + "\n")
        self._trained.flush()

    def record_eval(self, step: int, prompts: list, result) -> None:
        """Each eval's per-prompt correct counts: what paired comparisons and difficulty buckets need."""
        with open(self.dir / "eval_per_prompt.jsonl", "a") as fh:
            fh.write(json.dumps({"step": step, "k": result.k, "ids": [p.prompt_id for p in prompts],
                                 "difficulty": [p.difficulty for p in prompts], "correct": result.correct}) + "\n")

    def write_accounting(self, accounting: dict) -> Path:
        path = self.dir / "accounting.json"
        path.write_text(json.dumps(accounting, indent=2))
        return path
