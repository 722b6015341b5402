"""Checks on a policy folder before anything starts: a transformers config that parses, weights
that open as safetensors, a tokenizer that fits the model's vocabulary, and a context long enough
for the configured prompt + response. Each failure is one clear message naming the path or key."""

from __future__ import annotations

from pathlib import Path

from ada_ray.config import AdaRayConfig, ConfigError
from ada_ray.errors import InputError


class ModelError(InputError, FileNotFoundError):
    pass


def check_policy_dir(path: str, cfg: AdaRayConfig) -> None:
    p = Path(path)
    if not p.is_dir():
        return  # a hub name (clusters); transformers reports problems itself
    from transformers import AutoConfig, AutoTokenizer

    try:
        mcfg = AutoConfig.from_pretrained(p)
    except Exception as exc:  # noqa: BLE001 - malformed json, unknown model type, ...
        raise ModelError(f"model.path {p}: config.json cannot be read ({type(exc).__name__}: {exc})") from None
    weights = sorted(p.glob("*.safetensors"))
    if not weights:
        bins = sorted(p.glob("*.bin")) + sorted(p.glob("*.pt"))
        hint = " (only pickle .bin/.pt weights, which ada_ray does not unpickle)" if bins else ""
        raise ModelError(f"model.path {p}: no .safetensors weights{hint}")
    from safetensors import safe_open

    for w in weights:
        try:
            with safe_open(str(w), framework="pt") as fh:
                fh.keys()
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"model.path {p}: weights file {w.name} is corrupt ({type(exc).__name__}: {exc})") from None
    try:
        tok = AutoTokenizer.from_pretrained(p)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"model.path {p}: tokenizer cannot be loaded ({type(exc).__name__}: {exc})") from None
    vocab = getattr(mcfg, "vocab_size", None)
    if vocab is not None and len(tok) > vocab:
        raise ModelError(f"model.path {p}: the tokenizer has {len(tok)} tokens but the model's vocab_size is "
                         f"{vocab}: tokenizer and model do not belong together")
    ctx = getattr(mcfg, "max_position_embeddings", None)
    if ctx is not None and cfg.sampler.max_model_len > ctx:
        raise ConfigError(f"config: sampler.max_model_len = {cfg.sampler.max_model_len} exceeds the model's context "
                          f"(max_position_embeddings = {ctx} in {p / 'config.json'})")
