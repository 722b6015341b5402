"""A run's storage: where its files last (`trainer.output_dir`/<run name>: a folder or a storage URI)
and the folder on the driver's node where the driver writes them first.

For a local or shared folder the two are one folder, as always. For a URI (``s3://``, ``gs://``,
``hdfs://``, ``file://``; ada_ray/storage.py) the driver writes into a staging folder,
``<staging root>/<hash of the URI>/<run name>`` (the same path on every node), and:

- ``push`` copies the run's own files up: with every checkpoint, before its COMPLETE marker (so the
  logs at the storage location always reach the latest complete checkpoint), and when the run ends;
- ``pull`` makes the staging folder a copy of them when a run starts, on whatever node, so a resume
  finds its logs (trimmed to the checkpoint's step as in a folder) and its MLflow store.

What goes to the URI: ``checkpoints/`` and ``final/`` (written there directly: each learner uploads
its own part from its own node, checkpoint.py assembles the rest), and the run's files: config.yaml,
metrics.jsonl, trained_prompts.jsonl, eval_per_prompt.jsonl, accounting.json, plots/, and the sqlite
MLflow store (mlflow.db, mlflow_run.json) when tracking.uri is not set. What stays in staging: the
sqlite store's artifact copies (mlartifacts/: config, plots and two more copies of the final policy) -
give tracking.uri (an MLflow server) to keep MLflow artifacts with a run whose output_dir is a URI.

At start every learner writes a probe through the same layer and the driver reads it back
(``probe_problems``): a folder that is not shared, or a URI some node cannot reach, is refused.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ada_ray import storage
from ada_ray.config import AdaRayConfig
from ada_ray.driver.output_paths import resolve_output_dir

NOT_MIRRORED = ("checkpoints", "final", "mlartifacts")  # written at the URI directly, or kept in staging


@dataclass
class RunStorage:
    root: str  # where the run's files last: a folder, or a URI
    local: Path  # the run's folder on this node: `root` itself, or the staging folder of a URI
    staging_dir: Optional[str] = None  # trainer.staging_dir

    @property
    def is_uri(self) -> bool:
        return storage.is_uri(self.root)

    @classmethod
    def for_config(cls, cfg: AdaRayConfig) -> "RunStorage":
        """The run's storage from trainer.output_dir and trainer.run_name. A URI is opened and a probe
        written, read back and removed here, so a location the driver cannot use is one line before
        anything starts."""
        t = cfg.trainer
        name = t.run_name or time.strftime(f"%Y%m%d-%H%M%S-{cfg.algo.name}")
        if not storage.is_uri(t.output_dir):
            base, note = resolve_output_dir(t.output_dir)
            if note:
                print(f"ada-ray: {note}", file=sys.stderr)
            return cls(str(base / name), base / name)
        storage.open_location(t.output_dir, "trainer.output_dir")
        root = storage.join(t.output_dir, name)
        check_writable(root)
        key = hashlib.sha256(root.encode()).hexdigest()[:12]
        return cls(root, storage.staging_root(t.staging_dir) / key / name, t.staging_dir)

    def location(self, *parts: str) -> str:
        return storage.join(self.root, *parts)

    def pull(self) -> None:
        """A URI: the staging folder becomes a copy of the run's files at the URI (none for a new run)."""
        if not self.is_uri:
            return
        shutil.rmtree(self.local, ignore_errors=True)
        self.local.mkdir(parents=True)
        for name in _mirrored(storage.list_names(self.root)):
            storage.download(self.location(name), self.local / name)

    def push(self) -> None:
        """A URI: the run's files in the staging folder are copied up (checkpoints and final/ are not
        here: they are written at the URI directly)."""
        if not self.is_uri or not self.local.is_dir():
            return
        for name in _mirrored(p.name for p in self.local.iterdir()):
            storage.upload(self.local / name, self.location(name))

    def local_copy(self, name: str) -> Path:
        """The run's `name` (a folder written at the storage location) on this node: itself for a
        folder; for a URI a copy downloaded into the staging folder."""
        if self.is_uri:
            shutil.rmtree(self.local / name, ignore_errors=True)
            storage.download(self.location(name), self.local / name)
        return self.local / name


def check_writable(root: str) -> None:
    """The driver writes a probe at `root`, reads it back and removes it; one line if it cannot."""
    probe = storage.join(root, ".write_probe")
    try:
        storage.write_text(storage.join(probe, "driver"), "ok")
        seen = storage.read_text(storage.join(probe, "driver"))
        storage.delete(probe)
    except OSError as exc:
        raise storage.StorageError(f"trainer.output_dir: cannot write to {root} ({storage.why(exc)})") from None
    if seen != "ok":
        raise storage.StorageError(f"trainer.output_dir: a file written to {root} read back as {seen[:40]!r}")


def _mirrored(names) -> list[str]:
    return sorted(n for n in names if not n.startswith(".") and n not in NOT_MIRRORED)


def probe_problems(probe: str, answers: list[tuple[str, Optional[str]]]) -> list[str]:
    """What went wrong with the learners' probes under `probe`: answers[rank] is (the learner's node,
    why it could not write, or None). A probe the driver cannot read back as written is named too."""
    out = []
    for rank, (node, error) in enumerate(answers):
        if error:
            out.append(f"learner {rank} on node {node} cannot write there ({error})")
            continue
        try:
            seen: Optional[str] = storage.read_text(storage.join(probe, f"learner_{rank}"))
        except OSError:
            seen = None
        if seen != node:
            out.append(f"the driver cannot read what learner {rank} on node {node} wrote there")
    return out


def not_shared(location: str, driver_node: str, problems: list[str]) -> str:
    """The one line that refuses a run whose learners' files the driver cannot see."""
    fix = ("every node must reach it (credentials, network; file:// must be a folder every node mounts)"
           if storage.is_uri(location) else
           "give a folder every node mounts (NFS, a mounted bucket) or a storage URI (s3://, gs://, hdfs://)")
    return (f"trainer.output_dir: {location} is not shared by the driver (node {driver_node}) and every learner: "
            f"{'; '.join(problems)}; {fix}")
