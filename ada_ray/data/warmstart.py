"""Supervised warm-start of the embedded policy, and its cache.

The default recipe's result ships with the package (``shipped_policy.py``), so every machine
starts from the same weights; this module builds any other recipe (or the shipped one again, with
``ada-ray warmstart --rebuild`` / ``--ship``).

Trains the tiny Qwen2 on the embedded task (loss on answer + <eos> only; AdamW, linear warm-up,
cosine decay, grad clip) for a fixed number of steps, so that per-prompt pass rates at T = 1 spread
from ~0 (hard levels) to ~1 (easy ones). The result is saved with ``save_pretrained`` under the
cache (``$ADA_RAY_CACHE`` or ``~/.cache/ada_ray``) in a folder named by a hash of everything that
determines it; a second call returns the cached folder. Builds are atomic (a temp folder renamed
into place) and serialised by a file lock, so concurrent runs never see half a model.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from ada_ray.config import AdaRayConfig
from ada_ray.data import embedded_task
from ada_ray.data.model_check import ModelError, check_policy_dir
from ada_ray.data.tiny_policy import BOS_ID, EOS_ID, PAD_ID, build_model, build_tokenizer, save_policy

BUILD_VERSION = 1  # bump when the recipe changes in a way the config does not capture


def cache_root(cfg: AdaRayConfig) -> Path:
    root = cfg.model.cache_dir or os.environ.get("ADA_RAY_CACHE") or str(Path.home() / ".cache" / "ada_ray")
    return Path(root).expanduser().resolve()


def recipe(cfg: AdaRayConfig) -> dict:
    """Everything that determines the embedded policy (its cache key is a hash of this)."""
    return {"v": BUILD_VERSION, "shape": asdict(cfg.model.embedded), "warm": asdict(cfg.model.warmstart),
            "seed": cfg.data.seed, **({"order": cfg.data.answer_order} if cfg.data.answer_order != "msb_first" else {})}


def embedded_key(cfg: AdaRayConfig) -> str:
    return hashlib.sha1(json.dumps(recipe(cfg), sort_keys=True).encode()).hexdigest()[:12]


def embedded_path(cfg: AdaRayConfig) -> Path:
    return cache_root(cfg) / f"embedded-{embedded_key(cfg)}"


def _lr_at(step: int, cfg) -> float:
    w = cfg.warmstart
    if step < w.warmup_steps:
        return w.lr * (step + 1) / w.warmup_steps
    frac = (step - w.warmup_steps) / max(1, w.steps - w.warmup_steps)
    lo = w.lr * w.min_lr_ratio
    return lo + 0.5 * (w.lr - lo) * (1 + math.cos(math.pi * min(frac, 1.0)))


def _batch(items, vocab: dict[str, int]):
    """Char-level encoding (the tokenizer has one token per character and prepends <bos>)."""
    import torch

    seqs, labels = [], []
    for it in items:
        p = [BOS_ID] + [vocab[c] for c in it.question]
        a = [vocab[c] for c in it.answer] + [EOS_ID]
        seqs.append(p + a)
        labels.append([-100] * len(p) + a)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    lab = torch.full((len(seqs), width), -100, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(lb)] = torch.tensor(lb)
        att[i, : len(s)] = 1
    return ids, lab, att


def train_warmstart(cfg: AdaRayConfig, out: Path, log: Optional[Callable[[str], None]] = None) -> dict:
    """Build the tokenizer and model, run the SFT, save to `out`. Returns a report dict."""
    import torch

    log = log or (lambda s: None)
    w = cfg.model.warmstart
    torch.set_num_threads(max(1, w.threads))
    t0 = time.time()
    tok = build_tokenizer()
    model = build_model(cfg.model.embedded, len(tok), seed=w.seed)
    model.train()
    vocab = tok.get_vocab()
    held = {e.question for lv in w.levels for e in embedded_task.held_out(lv, cfg.data.seed)}
    stream = embedded_task.sft_stream(list(w.levels), w.seed, held, cfg.data.answer_order)
    opt = torch.optim.AdamW(model.parameters(), lr=w.lr, betas=(0.9, 0.98), weight_decay=w.weight_decay)
    losses: list[float] = []
    stop = w.steps if w.stop_at_step is None else min(w.steps, w.stop_at_step)
    for step in range(stop):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg.model)
        ids, lab, att = _batch([next(stream) for _ in range(w.batch_size)], vocab)
        out_ = model(input_ids=ids, attention_mask=att, labels=lab)
        opt.zero_grad(set_to_none=True)
        out_.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(out_.loss.detach()))
        if (step + 1) % 100 == 0 or step == stop - 1:
            recent = sum(losses[-100:]) / len(losses[-100:])
            log(f"warm-start step {step + 1}/{stop} loss {recent:.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    save_policy(model, tok, out)
    report = {"steps": stop, "seconds": round(time.time() - t0, 1), "final_loss": sum(losses[-100:]) / len(losses[-100:]),
              "params": sum(p.numel() for p in model.parameters()), "key": embedded_key(cfg)}
    (out / "warmstart.json").write_text(json.dumps(report, indent=2))
    return report


def ensure_embedded_policy(cfg: AdaRayConfig, log: Optional[Callable[[str], None]] = None,
                           use_shipped: bool = True) -> Path:
    """The embedded policy folder: the shipped one when the config asks for its recipe, else the
    cached build, building it first if needed (atomic, locked)."""
    if use_shipped:
        from ada_ray.data.shipped_policy import shipped_for

        shipped = shipped_for(embedded_key(cfg))
        if shipped is not None:
            return shipped
    final = embedded_path(cfg)
    if (final / "warmstart.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "warmstart.json").is_file():
            return final
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (log or print)(f"building the embedded policy (one time, ~{cfg.model.warmstart.steps // 300} min) into {final}")
        train_warmstart(cfg, tmp, log or print)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    return final


def resolve_model_path(cfg: AdaRayConfig, log: Optional[Callable[[str], None]] = None) -> str:
    """model.path as a local folder: 'embedded' builds/caches the tiny policy; a folder must exist
    and hold a config.json; anything else is passed on as a hub name (clusters only)."""
    if cfg.model.path == "embedded":
        path = str(ensure_embedded_policy(cfg, log))
        check_policy_dir(path, cfg)
        return path
    p = Path(cfg.model.path).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise ModelError(f"model.path {p} exists but has no config.json: not a transformers checkpoint")
        check_policy_dir(str(p), cfg)
        return str(p.resolve())
    looks_like_path = cfg.model.path.startswith((".", "/", "~")) or cfg.model.path.count("/") != 1
    if looks_like_path or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelError(f"model.path {cfg.model.path!r} does not exist (expected a local folder with "
                                "config.json, 'embedded', or a hub name such as Qwen/Qwen2.5-Math-1.5B)")
    return cfg.model.path
