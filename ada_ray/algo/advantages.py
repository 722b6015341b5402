"""Advantages per algorithm, from a group's rewards (pure Python, no torch).

grpo / dapo : A = r - mean(group) [/ (std(group) + eps) when norm_adv_by_std; unbiased std as verl]
ada_seq     : A = r - p_hat with p_hat = positives / size over the WHOLE pool of this step (not the
              kept n); optional /std(pool), optional 1/p_hat weight (paper v3), guarded at p_hat = 0
ada_est     : A = (r - r_bar) * (1/sqrt(r_bar) if residual weight), r_bar over all this step's
              samples of the prompt, guarded at r_bar = 0
"""

from __future__ import annotations

import math
from typing import Sequence

EPS = 1e-6


def _unbiased_std(values: Sequence[float]) -> float:
    m = len(values)
    if m < 2:
        return 1.0
    mean = sum(values) / m
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (m - 1))


def group_advantages(rewards: Sequence[float], norm_by_std: bool) -> list[float]:
    """GRPO: group-mean baseline, optional std normalisation. A group of one gets A = r (mean 0)."""
    if len(rewards) == 0:
        return []
    if len(rewards) == 1:
        return [float(rewards[0])]
    mean = sum(rewards) / len(rewards)
    if not norm_by_std:
        return [r - mean for r in rewards]
    std = _unbiased_std(rewards)
    return [(r - mean) / (std + EPS) for r in rewards]


def pool_advantages(
    kept_rewards: Sequence[float],
    pool_positives: int,
    pool_size: int,
    norm_by_std: bool = False,
    inverse_p_weight: bool = False,
) -> list[float]:
    """Reinforce-Ada-Seq global statistics: baseline p_hat from every sample of the pool."""
    if pool_size < 1:
        raise ValueError("pool_size must be >= 1")
    if not 0 <= pool_positives <= pool_size:
        raise ValueError(f"pool_positives {pool_positives} outside [0, {pool_size}]")
    p_hat = pool_positives / pool_size
    adv = [r - p_hat for r in kept_rewards]
    if norm_by_std:
        pool = [1.0] * pool_positives + [0.0] * (pool_size - pool_positives)
        std = max(_unbiased_std(pool), EPS) if pool_size > 1 else 1.0
        adv = [a / (std + EPS) for a in adv]
    if inverse_p_weight:
        # 1/p_hat, guarded: p_hat = 0 -> use the smallest estimable rate 1/pool_size (binary rewards
        # then give A = 0 anyway); p_hat = 1 -> weight 1 and A = 0.
        adv = [a / max(p_hat, 1.0 / pool_size) for a in adv]
    return adv


def est_advantages(rewards: Sequence[float], positives: int, residual_weight: bool) -> list[float]:
    """Reinforce-Ada-Est: baseline r_bar = positives / n of this step; residual 1/sqrt(r_bar)."""
    m = len(rewards)
    if m == 0:
        return []
    r_bar = positives / m
    adv = [r - r_bar for r in rewards]
    if residual_weight:
        w = 1.0 / math.sqrt(max(r_bar, 1.0 / m))
        adv = [a * w for a in adv]
    return adv


def is_zero_signal(rewards: Sequence[float]) -> bool:
    """DAPO's filter: a group whose rewards are all equal gives no gradient."""
    return len(rewards) == 0 or max(rewards) - min(rewards) < 1e-12
