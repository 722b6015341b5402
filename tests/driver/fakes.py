"""In-process stand-ins for the driver's seams: a DriverRuntime that serves scripted cohorts and
records every verb called on it, and a Tracker that keeps the metrics it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ada_ray import storage
from ada_ray.algo.payloads import CohortPayloadsLost
from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Group, Sample, Signal
from ada_ray.evaluate import summarize


def cohort(step: int, prompts: int = 2, samples_each: int = 4, version: Optional[int] = None) -> CohortResult:
    """A completed cohort of `prompts` groups, half of each group's samples right."""
    groups = []
    for j in range(prompts):
        pid = f"p{step}-{j}"
        samples = [Sample(pid, [5, 6, 2], [-0.5, -0.5, -0.1], float(i % 2), step if version is None else version)
                   for i in range(samples_each)]
        groups.append(Group(pid, [1, 2, 3], samples, [1.0 if s.reward else -1.0 for s in samples], step,
                            pool_size=samples_each, pool_positives=samples_each // 2, rounds=1, exit_fired=True,
                            round0_rewards=[s.reward for s in samples]))
    return CohortResult(step, groups, [], draws=prompts, dapo_cap_hit=False, samples_generated=prompts * samples_each)


class FakeRuntime:
    """Serves `script[step]` from wait_cohort (a CohortResult, a Signal, or an exception to raise;
    past the script's end: Signal.END). `fail_train` maps a step to an exception train() raises;
    `nonfinite` maps a step to the nonfinite streak its learners report."""

    def __init__(self, script: list, fail_train: Optional[dict] = None, nonfinite: Optional[dict] = None,
                 lose_once: Optional[dict] = None):
        """`lose_once` maps a step to payload owners its first train() finds lost (CohortPayloadsLost)."""
        self.script = script
        self.fail_train = fail_train or {}
        self.lose_once = dict(lose_once or {})
        self.nonfinite = nonfinite or {}
        self.calls: list[tuple] = []
        self.replaced = 0
        self.version = 0
        self.tokens = 0
        self.queue = {"cursor": 0}
        self.stopped = False

    def check_shared_dir(self, location: str) -> None:
        self.calls.append(("check_shared_dir",))

    def start_sampling(self) -> None:
        self.calls.append(("start_sampling",))

    def wait_cohort(self, step: int, timeout_s: float):
        self.calls.append(("wait", step))
        got = self.script[step] if step < len(self.script) else Signal.END
        if isinstance(got, BaseException):
            raise got
        if isinstance(got, CohortResult):
            self.tokens += got.samples_generated * 3
            self.queue["cursor"] = step + 1
        return got

    def train(self, cohort: CohortResult, step: int) -> dict:
        self.calls.append(("train", step, tuple(g.prompt_id for g in cohort.groups)))
        if step in self.fail_train:
            raise self.fail_train[step]
        if step in self.lose_once:
            raise CohortPayloadsLost(self.lose_once.pop(step))
        return {"loss": 0.25, "tokens": 12.0, "train_seconds": 0.0, "nonfinite_streak": float(self.nonfinite.get(step, 0))}

    def return_cohort(self, cohort: CohortResult, owners: list[str]) -> int:
        self.calls.append(("return_cohort", cohort.index, tuple(owners)))
        return len(cohort.groups)

    def sync_weights(self, version: int) -> dict:
        self.calls.append(("sync", version))
        self.version = version
        return {"sync/seconds": 0.0, "sync/mb": 0.0}

    def evaluate(self, prompts: list, k: int, temperature: float, seed: int, max_tokens=None):
        self.calls.append(("evaluate", self.version))
        return summarize([p.difficulty for p in prompts], [min(k, self.version) for _ in prompts], k)

    def sampler_stats(self) -> list[dict]:
        return [{"busy_s": 1.0 * self.version, "idle_s": 0.5 * self.version, "update_s": 0.0, "tokens": self.tokens,
                 "samples": self.tokens // 3, "version": self.version, "lease_calls": 2 * self.version,
                 "report_calls": 3 * self.version, "asks_on_reports": self.version}]

    def queue_stats(self) -> dict:
        return {"busy_s": 0.0, "calls": len(self.calls)}

    def save_learners(self, directory: Optional[str], tag: str, hf_dir: str, tokenizer_from: str) -> None:
        """Like the learners: each part written through ada_ray.storage (a folder or a URI)."""
        self.calls.append(("save", tag))
        for where, sub in ((directory, tag), (hf_dir, None)):
            if where is not None:
                with storage.writing(where) as local:
                    d = local / sub if sub else local
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "weights").write_text(str(self.version))

    def load_learners(self, directory: str, tag: str) -> int:
        self.calls.append(("load", tag))
        with storage.reading(directory) as local:
            return int((local / tag / "weights").read_text())

    def queue_state(self) -> dict:
        return dict(self.queue)

    def load_queue(self, state: dict) -> None:
        self.calls.append(("load_queue", state["cursor"]))
        self.queue = dict(state)

    def shutdown(self) -> dict:
        self.calls.append(("shutdown",))
        self.stopped = True
        return {"issued": 1, "completed": 1}

    def verbs(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]


class FakeTracker:
    run_id = "fake-run"

    def __init__(self):
        self.metrics: dict[int, dict] = {}
        self.artifacts: list[tuple] = []
        self.closed_with: Optional[str] = None

    def log_metrics(self, step: int, m: dict) -> None:
        self.metrics.setdefault(step, {}).update(m)

    def log_artifact(self, path, where: Optional[str] = None) -> None:
        self.artifacts.append((Path(path).name, where))

    def log_model(self, path) -> None:
        self.artifacts.append((Path(path).name, "model"))

    def close(self, status: str) -> None:
        self.closed_with = status
