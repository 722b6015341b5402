"""Setting a run up before any actor starts: the run's storage (a folder, or a URI opened and
written to here; driver/run_storage.py) and its run dir, the resume point (and that its config is
compatible), the model, the tokenized datasets (and that there are enough prompts for a batch),
config.yaml, and the MLflow run with its params, tags and datasets. Every input is checked here,
so a mistake is reported before anything is started or half-written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ada_ray.config import AdaRayConfig, flatten, to_yaml
from ada_ray.driver import checkpoint as ckpt
from ada_ray.driver.run_files import RunFiles
from ada_ray.driver.run_storage import RunStorage


@dataclass
class RunSetup:
    cfg: AdaRayConfig
    log: Any
    run_dir: Path  # the run's folder on this node (for a storage URI: its staging folder)
    model_path: str
    train_set: Any  # ada_ray.data.datasets.PromptSet
    eval_set: Any  # None without an eval split
    tracker: Any  # ada_ray.driver.tracking.Tracker
    resume_from: Optional[str] = None  # the checkpoint this run resumes from (a folder or a URI)
    meta: Optional[dict] = None  # its trainer.json
    storage: Optional[RunStorage] = None  # where the run's files last (default: run_dir itself)

    def __post_init__(self):
        if self.storage is None:
            self.storage = RunStorage(str(self.run_dir), Path(self.run_dir))


def set_up(cfg: AdaRayConfig, log=print, config_name: Optional[str] = None) -> RunSetup:
    from transformers import AutoTokenizer

    from ada_ray.data.datasets import check_batch, load_splits
    from ada_ray.data.warmstart import cache_root, resolve_model_path
    from ada_ray.driver.tracking import Tracker, run_tags

    run = RunStorage.for_config(cfg)  # a URI that cannot be opened or written: one line, here
    resume_from = ckpt.resolve_resume(cfg, run.root)
    meta = None
    if resume_from is not None:
        meta = ckpt.load_meta(resume_from)
        ckpt.check_compatible(meta["config"], cfg, resume_from)
    model_path = resolve_model_path(cfg, log)
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, eval_set = load_splits(cfg.data, tok, table_cache=cache_root(cfg), log=log)  # train: a prompt table
    check_batch(train_set, cfg.trainer.batch_prompts)  # before anything is written or started
    run.pull()  # a URI: the run's files so far into this node's staging folder
    run_dir = run.local
    run_dir.mkdir(parents=True, exist_ok=True)
    files = RunFiles(run_dir)
    if resume_from is not None:
        files.truncate(int(meta["step"]))
    config_file = files.write_config(to_yaml(cfg))
    log(f"run dir {run_dir}" + (f" (staged for {run.root})" if run.is_uri else "")
        + f"\nmodel {model_path}\n{len(train_set.prompts)} train prompts"
        + (f", {len(eval_set.prompts)} eval prompts" if eval_set else "")
        + (f" ({train_set.dropped_too_long} dropped as longer than data.max_prompt_tokens)"
           if train_set.dropped_too_long else ""))
    tracker = Tracker(run_dir, cfg.tracking.enabled, cfg.tracking.uri, cfg.tracking.experiment, run_dir.name, log,
                      resume_run_id=(meta or {}).get("mlflow_run_id"))
    tracker.log_params(flatten(cfg))
    tracker.set_tags(run_tags(cfg, model_path, config_name))
    tracker.log_dataset(train_set, "training")
    tracker.log_dataset(eval_set, "eval")
    tracker.log_artifact(config_file)
    return RunSetup(cfg, log, run_dir, model_path, train_set, eval_set, tracker, resume_from, meta, run)
