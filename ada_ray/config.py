"""The config of a run: loading YAML presets from conf/ (with a small ``defaults: [other.yaml]`` list
for inheritance), dotted ``key=value`` overrides from the command line, then validation. Every
mistake - an unknown key, a wrong type, an impossible combination - is reported as one
:class:`ConfigError` naming the key and what was expected, before anything starts.

The schema (a dataclass per section) is ada_ray/config_schema.py and the checks
ada_ray/config_checks.py; both are re-exported here, so ``from ada_ray.config import AlgoConfig``
is the one way callers name them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from ada_ray.config_checks import validate
from ada_ray.config_schema import (ADA_SEQ, ALGORITHMS, CHOICES, CONF_DIR, AdaRayConfig, AlgoConfig, ConfigError,
                                   DataConfig, EmbeddedModelConfig, LearnerConfig, ModelConfig, PrepareConfig,
                                   SamplerConfig, TrackingConfig, TrainerConfig, WarmStartConfig, WeightSyncConfig)

__all__ = ["ADA_SEQ", "ALGORITHMS", "CHOICES", "CONF_DIR", "AdaRayConfig", "AlgoConfig", "ConfigError", "DataConfig",
           "EmbeddedModelConfig", "LearnerConfig", "ModelConfig", "PrepareConfig", "SamplerConfig", "TrackingConfig",
           "TrainerConfig", "WarmStartConfig", "WeightSyncConfig", "load_config", "validate", "to_yaml", "to_dict",
           "from_dict", "flatten", "parse_overrides", "resolve_config_path"]

# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------


MAPPINGS = ("sampler.resources", "learner.resources")  # keys that hold a mapping of any names


def _schema() -> DictConfig:
    cfg = OmegaConf.structured(AdaRayConfig)
    OmegaConf.set_struct(cfg, True)
    for key in MAPPINGS:
        OmegaConf.set_struct(OmegaConf.select(cfg, key), False)
    return cfg


def _valid_keys(prefix: str) -> list[str]:
    node = OmegaConf.select(_schema(), prefix) if prefix else _schema()
    return sorted(node.keys()) if isinstance(node, DictConfig) else []


def _field_type(key: str) -> str:
    """The annotated type of a dotted schema key, e.g. 'int' for 'algo.n'."""
    cls: Any = AdaRayConfig
    for part in key.split("."):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        f = fields[part]
        if f.default_factory is not dataclasses.MISSING:  # nested section or list
            value = f.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(value):
                cls = type(value)
                continue
        return str(f.type).replace("Optional[", "null or ").rstrip("]") if "Optional" in str(f.type) else str(f.type)
    return "a section (mapping)"


def _explain(exc: OmegaConfBaseException, source: str) -> ConfigError:
    key = getattr(exc, "full_key", None) or ""
    msg = str(exc).splitlines()[0]
    if isinstance(exc, ConfigKeyError) or " not in '" in msg:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        where = f"under '{parent}'" if parent else "at the top level"
        return ConfigError(f"{source}: unknown config key '{key}'; valid keys {where}: {', '.join(_valid_keys(parent))}")
    if key:
        try:
            expected = _field_type(key)
        except (KeyError, TypeError):
            expected = "the type in ada_ray/config_schema.py"
        return ConfigError(f"{source}: bad value for '{key}': {msg} (expected {expected})")
    return ConfigError(f"{source}: {msg}")


def _load_yaml(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, DictConfig]]:
    """A YAML file and the files its ``defaults`` list names, base files first."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'defaults' forms a cycle ({' -> '.join(str(p) for p in seen + (path,))})")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        node = OmegaConf.load(path)
    except Exception as exc:  # yaml syntax errors
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if node is None or (isinstance(node, DictConfig) and len(node) == 0):
        return []
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{path}: expected a mapping at the top level, got a {type(node).__name__}")
    out: list[tuple[str, DictConfig]] = []
    if "defaults" in node:
        bases = node.pop("defaults")
        if isinstance(bases, str):
            bases = [bases]
        if not isinstance(bases, (list, ListConfig)):
            raise ConfigError(f"{path}: 'defaults' must be a list of YAML paths relative to this file")
        for base in bases:
            out.extend(_load_yaml(path.parent / str(base), seen + (path,)))
    out.append((str(path), node))
    return out


def resolve_config_path(name: str | os.PathLike | None) -> Optional[Path]:
    """A config argument: a path, or a preset name found in conf/ (with or without .yaml)."""
    if name is None:
        return None
    p = Path(name)
    if p.is_file():
        return p
    for cand in (CONF_DIR / p, CONF_DIR / f"{p}.yaml", CONF_DIR / p.name):
        if cand.is_file():
            return cand
    raise ConfigError(f"config file not found: {name} (looked in . and {CONF_DIR})")


def parse_overrides(overrides: list[str]) -> DictConfig:
    for ov in overrides:
        if "=" not in ov or ov.startswith("="):
            raise ConfigError(f"command line: override '{ov}' is not of the form key=value (e.g. algo.n=8)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"command line: cannot parse overrides: {exc}") from None


def load_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    *,
    validate_config: bool = True,
    base: Optional[dict] = None,
) -> AdaRayConfig:
    """Schema defaults <- `base` (a saved config) <- YAML (and its defaults list) <- dotted
    overrides, then validation."""
    cfg = _schema()
    layers: list[tuple[str, Any]] = [("saved config", OmegaConf.create(base))] if base else []
    p = resolve_config_path(path)
    if p is not None:
        layers.extend(_load_yaml(p))
    if overrides:
        layers.append(("command line", parse_overrides(list(overrides))))
    for source, layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except OmegaConfBaseException as exc:
            raise _explain(exc, source) from None
    try:
        obj: AdaRayConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise _explain(exc, "config") from None
    if obj.trainer.progress == "False":  # YAML 1.1 reads a bare `off` as false
        obj.trainer.progress = "off"
    if validate_config:
        validate(obj)
    return obj


def to_yaml(cfg: AdaRayConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: AdaRayConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def from_dict(d: dict[str, Any]) -> AdaRayConfig:
    """Rebuild a config from :func:`to_dict` output (checkpoints, Ray actors)."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(_schema(), d))  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise _explain(exc, "saved config") from None


def flatten(cfg: AdaRayConfig) -> dict[str, Any]:
    """Dotted-key view, e.g. {'algo.n': 4, ...} (MLflow params)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = node

    walk("", to_dict(cfg))
    return out
