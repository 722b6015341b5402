"""Checkpoints: atomic on disk, complete enough to resume exactly.

A checkpoint ``<run_dir>/checkpoints/step_<k>/`` holds the learners' DeepSpeed state (model,
optimizer, LR schedule), the policy in HF format (``hf/``: safetensors + tokenizer, loadable by
transformers and vLLM), the PromptQueue state (in-flight pools, pass-rate memory, data cursor,
accounting) and ``trainer.json`` (step, config, MLflow run id). It is written into a temporary
folder and renamed into place, then ``latest`` is replaced atomically, so a crash at any moment
leaves the previous checkpoint intact. Nothing that can run code is unpickled on load: JSON,
safetensors, and DeepSpeed's state through a ``torch.load(weights_only=True)`` checkpoint engine
(``ada_ray.learner.core.weights_only_checkpoint_engine``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

from ada_ray.config import AdaRayConfig, ConfigError, flatten, from_dict, to_dict

# keys that may change across a resume without breaking it
RESUMABLE_CHANGES = ("trainer.total_steps", "trainer.total_epochs", "trainer.eval_every", "trainer.save_every",
                     "trainer.resume", "trainer.max_restarts", "trainer.progress", "trainer.ray_address", "trainer.ray_num_cpus",
                     "trainer.output_dir", "trainer.run_name", "tracking.", "sampler.num_samplers",
                     "sampler.lease_timeout_s", "sampler.reward_workers", "weight_sync.", "trainer.eval_samples",
                     "trainer.eval_temperature", "learner.max_nonfinite_steps", "model.cache_dir")


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def save(run_dir: Path, step: int, cfg: AdaRayConfig, rt, model_path: str, extra: dict) -> Path:
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rt.save_learners(str(tmp / "learner"), f"step_{step}", str(tmp / "hf"), model_path)
    queue_state = rt.queue_state()
    (tmp / "queue.json").write_text(json.dumps(queue_state))
    (tmp / "trainer.json").write_text(json.dumps({"step": step, "config": to_dict(cfg), **extra}))
    (tmp / "COMPLETE").write_text("ok\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    write_json_atomic(root / "latest", {"step": step, "path": final.name})
    return final


def find_latest(run_dir: Path) -> Optional[Path]:
    root = checkpoints_dir(run_dir)
    pointer = root / "latest"
    if pointer.is_file():
        cand = root / json.loads(pointer.read_text())["path"]
        if (cand / "COMPLETE").is_file():
            return cand
    done = sorted((p for p in root.glob("step_*") if (p / "COMPLETE").is_file()),
                  key=lambda p: int(p.name.split("_")[1]))
    return done[-1] if done else None


def resolve_resume(cfg: AdaRayConfig, run_dir: Path) -> Optional[Path]:
    r = cfg.trainer.resume
    if r is None or r == "":
        return None
    if r == "auto":
        return find_latest(run_dir)
    p = Path(r).expanduser()
    if (p / "checkpoints").is_dir():  # a run directory
        found = find_latest(p)
        if found is None:
            raise ConfigError(f"trainer.resume={r}: no complete checkpoint under {p / 'checkpoints'}")
        return found
    if not (p / "COMPLETE").is_file():
        raise ConfigError(f"trainer.resume={r}: not a complete checkpoint (no COMPLETE marker in {p})")
    return p


def load_meta(ckpt: Path) -> dict:
    return json.loads((ckpt / "trainer.json").read_text())


def check_compatible(saved: dict, cfg: AdaRayConfig, ckpt: Path) -> None:
    """A checkpoint made with a different config (model, data, algorithm, optimizer) is refused."""
    old = flatten(from_dict(saved))
    new = flatten(cfg)
    diff = [k for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k) and not any(k == r or (r.endswith(".") and k.startswith(r))
                                                   for r in RESUMABLE_CHANGES)]
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:6])
        raise ConfigError(f"checkpoint {ckpt} was made with a different config ({shown}"
                          f"{' ...' if len(diff) > 6 else ''}); resume with the same settings or start a new run")
