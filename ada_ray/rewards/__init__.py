"""Verifiers: exact match for the embedded task, math-verify for math answers, user plug-ins.

A reward function is ``fn(completion: str, answer: str) -> float``. ``load_reward`` resolves the
config string: "exact", "math", or "package.module:function" (plug-ins load only from a module the
config names). ``SafeScorer`` runs any of them so that one that raises, hangs or returns a
non-number scores 0, is counted, and never crashes or stalls the caller.
"""

from ada_ray.rewards.registry import load_reward  # noqa: F401
from ada_ray.rewards.safe import SafeScorer, ScoreStats  # noqa: F401
