"""Checkpoints: complete enough to resume exactly, and never used unless complete - in a folder or
at a storage URI (ada_ray/storage.py).

A checkpoint ``<run>/checkpoints/step_<k>/`` holds the learners' DeepSpeed state (``learner/``: model,
optimizer, LR schedule), the policy in HF format (``hf/``: safetensors + tokenizer, loadable by
transformers and vLLM), the PromptQueue state (``queue.json``: in-flight pools, pass-rate memory,
data cursor, accounting) and ``trainer.json`` (step, config, MLflow run id). Parts first, then the
``COMPLETE`` marker, then the ``latest`` pointer, so a crash at any moment leaves the previous
checkpoint the one found:

- in a folder, the checkpoint is written beside (``.step_<k>.tmp``) and renamed into place;
- at a URI (object stores cannot rename a folder) it is written in place, after the COMPLETE marker
  of any older attempt at the same step is deleted. Each learner writes its DeepSpeed part on its own
  node and copies it up itself; the driver adds queue.json and trainer.json and the run's logs
  (RunStorage.push) once every learner has answered, and only then COMPLETE.

A resume (``trainer.resume=auto``, a run folder or URI, or a checkpoint's) reads from the storage
location on any node: each learner copies ``learner/`` down to its own staging folder and loads it as
from a folder. Nothing that can run code is unpickled on load: JSON, safetensors, and DeepSpeed's
state through a ``torch.load(weights_only=True)`` checkpoint engine
(``ada_ray.learner.core.weights_only_checkpoint_engine``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Union

from ada_ray import storage
from ada_ray.config import AdaRayConfig, ConfigError, flatten, from_dict, to_dict

# keys that may change across a resume without breaking it
RESUMABLE_CHANGES = ("trainer.total_steps", "trainer.total_epochs", "trainer.eval_every", "trainer.save_every",
                     "trainer.resume", "trainer.max_restarts", "trainer.progress", "trainer.ray_address", "trainer.ray_num_cpus",
                     "trainer.output_dir", "trainer.staging_dir", "trainer.run_name", "tracking.", "sampler.num_samplers",
                     "sampler.lease_timeout_s", "sampler.reward_workers", "sampler.queue_relay", "sampler.resources.", "learner.resources.",
                     "weight_sync.", "trainer.eval_samples", "trainer.eval_temperature", "learner.max_nonfinite_steps",
                     "model.cache_dir")
COMPLETE = "COMPLETE"
STEP = re.compile(r"step_(\d+)")
Location = Union[str, Path]  # a folder or a storage URI


def save(store, step: int, cfg: AdaRayConfig, rt, model_path: str, extra: dict) -> str:
    """Checkpoint `step` of the run whose storage is `store` (driver.run_storage.RunStorage); its location."""
    root = store.location("checkpoints")
    name = f"step_{step}"
    final = storage.join(root, name)
    work = final if store.is_uri else storage.join(root, f".{name}.tmp")
    discard(work)
    rt.save_learners(storage.join(work, "learner"), name, storage.join(work, "hf"), model_path)
    with storage.writing(work, store.staging_dir) as local:
        (local / "queue.json").write_text(json.dumps(rt.queue_state()))
        (local / "trainer.json").write_text(json.dumps({"step": step, "config": to_dict(cfg), **extra}))
    store.push()  # the logs at the storage location reach this step before it is complete
    storage.write_text(storage.join(work, COMPLETE), "ok\n")
    if work != final:
        storage.delete(final)
        storage.move(work, final)
    storage.write_text(storage.join(root, "latest"), json.dumps({"step": step, "path": name}))
    return final


def discard(location: Location) -> None:
    """An older or unfinished checkpoint at `location` out of the way: its COMPLETE marker first."""
    storage.delete(storage.join(location, COMPLETE))
    storage.delete(location)


def is_complete(location: Location) -> bool:
    return storage.is_file(storage.join(location, COMPLETE))


def find_latest(run_root: Location) -> Optional[str]:
    """The run's last complete checkpoint: the one `latest` names, else the highest complete step."""
    root = storage.join(run_root, "checkpoints")
    pointer = storage.join(root, "latest")
    if storage.is_file(pointer):
        try:
            cand: Optional[str] = storage.join(root, json.loads(storage.read_text(pointer))["path"])
        except (ValueError, KeyError, TypeError):  # unreadable: look at the steps themselves
            cand = None
        if cand is not None and is_complete(cand):
            return cand
    done = [n for n in storage.list_names(root) if STEP.fullmatch(n) and is_complete(storage.join(root, n))]
    return storage.join(root, max(done, key=lambda n: int(n.split("_")[1]))) if done else None


def resolve_resume(cfg: AdaRayConfig, run_root: Location) -> Optional[str]:
    """The checkpoint trainer.resume names: auto (this run's latest), a run folder or URI (its latest),
    or a checkpoint's folder or URI; None when not resuming."""
    r = cfg.trainer.resume
    if r is None or r == "":
        return None
    if r == "auto":
        return find_latest(run_root)
    loc = r if storage.is_uri(r) else str(Path(r).expanduser())
    storage.open_location(loc, "trainer.resume")
    if storage.is_dir(storage.join(loc, "checkpoints")):  # a run directory
        found = find_latest(loc)
        if found is None:
            raise ConfigError(f"trainer.resume={r}: no complete checkpoint under {storage.join(loc, 'checkpoints')}")
        return found
    if not is_complete(loc):
        raise ConfigError(f"trainer.resume={r}: not a complete checkpoint (no COMPLETE marker in {loc})")
    return loc


def load_meta(ckpt: Location) -> dict:
    return json.loads(storage.read_text(storage.join(ckpt, "trainer.json")))


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
