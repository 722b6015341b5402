"""Advantages per algorithm, from a group's rewards (pure Python, no torch).

grpo / dapo : A = r - mean(group) [/ (std(group) + eps) when norm_adv_by_std; unbiased std as verl]
ada_seq     : A = r - p_hat with p_hat = positives / size over the WHOLE pool of this step (not the
              kept n); optional /std(pool), optional 1/p_hat weight (paper v3), guarded at p_hat = 0
ada_est     : A = (r - r_bar) * (1/sqrt(r_bar) if residual weight), r_bar over all this step's
              samples of the prompt, guarded at r_bar = 0

Zero-variance guard for the std normalisation (``norm_adv_by_std``). verl divides by (std + 1e-6);
with non-binary rewards that explodes or amplifies noise, and so does the official code:
- ada_seq takes the std of the pool's binary labels (reward > threshold) but the numerator from the
  raw reward, so an all-negative pool of rewards 0.5 gave 0.5 / (1e-6 + 1e-6) = 250,000. A binary
  std is either 0 (every sample on one side of the threshold) or >= 1/sqrt(pool size), so no
  epsilon in between is "right" (dividing by max(std, 1e-6) still gives 5e5).
- grpo/dapo: std normalisation stretches any spread well above 1e-6 to unit scale, so a group
  whose rewards differ only by noise ([0.5, 0.5 + 1e-5]) got advantages of about +-0.62.
Both are pools/groups with no signal, so their normalised advantages are exactly 0, the same as
a GRPO group of equal rewards. "No signal" means: ada_seq, all pool samples on one side of the
threshold; grpo/dapo, a reward spread (max - min) below ZERO_SPREAD. Rewards here lie in [0, 1]:
1e-4 is far above float round-off (float32 is ~1e-7 at 1) and below any deliberate reward step
(partial credit, format bonuses), so only noise is cut. ``is_zero_signal`` (DAPO's filter) uses the
same ZERO_SPREAD, so exactly the groups zeroed here are the ones DAPO replaces.
"""

from __future__ import annotations

import math
from typing import Sequence

EPS = 1e-6  # verl's additive epsilon in (r - mean) / (std + EPS), kept for groups with a real spread
ZERO_SPREAD = 1e-4  # a group whose rewards span less than this carries no signal (see module docstring)


def _unbiased_std(values: Sequence[float]) -> float:
    m = len(values)
    if m < 2:
        return 1.0
    mean = sum(values) / m
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (m - 1))


def group_advantages(rewards: Sequence[float], norm_by_std: bool) -> list[float]:
    """GRPO: group-mean baseline, optional std normalisation. A group of one gets A = r (mean 0).

    With norm_by_std, a group whose reward spread is below ZERO_SPREAD (all equal up to float
    noise) gets A = 0 instead of noise divided by a near-zero std."""
    if len(rewards) == 0:
        return []
    if len(rewards) == 1:
        return [float(rewards[0])]
    mean = sum(rewards) / len(rewards)
    if not norm_by_std:
        return [r - mean for r in rewards]
    if max(rewards) - min(rewards) < ZERO_SPREAD:
        return [0.0] * len(rewards)
    std = _unbiased_std(rewards)
    return [(r - mean) / (std + EPS) for r in rewards]


def pool_advantages(
    kept_rewards: Sequence[float],
    pool_positives: int,
    pool_size: int,
    norm_by_std: bool = False,
    inverse_p_weight: bool = False,
) -> list[float]:
    """Reinforce-Ada-Seq global statistics: baseline p_hat from every sample of the pool.

    norm_by_std divides by the unbiased std of the pool's binary labels (+ EPS, as verl). When that
    std is 0 (all pool samples positive, or all negative; pool size >= 2) the advantages are 0:
    with binary rewards they are 0 anyway, and with non-binary rewards r - p_hat would otherwise be
    divided by ~1e-6 (0.5 -> 250,000). A pool of one keeps std 1, as a GRPO group of one."""
    if pool_size < 1:
        raise ValueError("pool_size must be >= 1")
    if not 0 <= pool_positives <= pool_size:
        raise ValueError(f"pool_positives {pool_positives} outside [0, {pool_size}]")
    p_hat = pool_positives / pool_size
    adv = [r - p_hat for r in kept_rewards]
    if norm_by_std:
        if pool_size > 1 and pool_positives in (0, pool_size):
            adv = [0.0] * len(adv)  # zero-variance pool: no signal (see the docstring)
        else:
            pool = [1.0] * pool_positives + [0.0] * (pool_size - pool_positives)
            std = _unbiased_std(pool) if pool_size > 1 else 1.0  # >= 1/sqrt(pool_size) here
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
    """DAPO's filter: a group whose rewards are all equal (spread below ZERO_SPREAD) gives no gradient."""
    return len(rewards) == 0 or max(rewards) - min(rewards) < ZERO_SPREAD
