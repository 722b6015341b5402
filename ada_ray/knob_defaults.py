"""Algorithm defaults for knobs left null: K_pos, K_neg and std-normalised advantages.

Pure rules on a few plain fields (no config module, no omegaconf): anything with the attributes
of :class:`KRuleFields` / :class:`NormFields` works, e.g. ``ada_ray.config.AlgoConfig``.
"""

from __future__ import annotations

from typing import Optional, Protocol


class KRuleFields(Protocol):
    """What the K_pos / K_neg rules read."""

    name: str
    n: int
    k_pos: Optional[int]
    k_neg: Optional[int]


class NormFields(Protocol):
    """What the advantage-normalisation rule reads."""

    name: str
    norm_adv_by_std: Optional[bool]


def effective_k_pos(a: KRuleFields) -> int:
    """K_pos as set, else 1 for ada_seq_pos and floor(n/2) otherwise (n=5: 2)."""
    if a.k_pos is not None:
        return a.k_pos
    return 1 if a.name == "ada_seq_pos" else a.n // 2


def effective_k_neg(a: KRuleFields) -> int:
    """K_neg as set, else 0 for ada_seq_pos and n - floor(n/2) otherwise (n=5: 3)."""
    if a.k_neg is not None:
        return a.k_neg
    return 0 if a.name == "ada_seq_pos" else a.n - a.n // 2


def effective_norm_adv_by_std(a: NormFields) -> bool:
    """norm_adv_by_std as set, else True for grpo / dapo and False for the Reinforce-Ada variants."""
    if a.norm_adv_by_std is not None:
        return a.norm_adv_by_std
    return a.name in ("grpo", "dapo")
