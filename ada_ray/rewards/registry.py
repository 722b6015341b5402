"""Resolve the config's reward string to a function (completion, answer) -> float."""

from __future__ import annotations

import importlib
from typing import Callable

from ada_ray.config import ConfigError

from ada_ray.rewards.exact import exact_match
from ada_ray.rewards.math_verify_reward import math_reward

RewardFn = Callable[[str, str], float]
BUILTIN: dict[str, RewardFn] = {"exact": exact_match, "math": math_reward}


def load_reward(spec: str) -> RewardFn:
    """'exact', 'math', or 'package.module:function' (imported by name; no code from data)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" not in spec:
        raise ConfigError(f"data.reward {spec!r}: expected 'exact', 'math' or 'package.module:function'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"data.reward {spec!r}: cannot import module {module_name!r} ({exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"data.reward {spec!r}: module {module_name!r} has no function {attr!r}")
    return fn
