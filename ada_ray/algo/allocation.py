"""Budget allocation for Reinforce-Ada-Est: integer budgets n_i with an exact total.

Two rules, chosen by ``kind`` (``algo.est_weight``):

inv_sqrt  the paper (v3 Alg. 1): n_i proportional to w_i = 1/sqrt(p_hat_i).
inv       the public code (branch ``hanze``, ``ray_trainer_ema.py``): every prompt first gets ONE
          sample, and the rest of the budget, total - B, is split proportionally to
          w_i = 1/max(p_hat_i, 1e-6). So n_i = 1 + share_i, not n_i proportional to w_i. Example:
          p_hat = [0.5596, 0.0391], total 16: shares of 14 are [0.914, 13.086] -> [2, 14], where
          plain proportionality would give [1.045, 14.955] -> [1, 15].

Both: each target t_i = clip(base + s * w_i, n_min, n_max) (base 0 for inv_sqrt, 1 for inv; 0 for
inv too in the corner case total < B, possible only with n_min = 0), with the scale s found by
water-filling so that sum_i t_i = total; then the integer part floor(t_i) plus one more unit for
the largest fractional parts until sum_i n_i == total exactly. The public code has no clip besides
">= 1": with n_min <= 1 and n_max >= the budget, ``inv`` gives exactly its numbers (same float
expression for the shares, same tie order). Ties in the fractional part go to the lower index for
``inv`` (the public code's stable sort), and to the larger weight, then the lower index, for
``inv_sqrt``. Either way the result is deterministic and monotone in p_hat (a harder prompt never
gets fewer samples).
"""

from __future__ import annotations

import math
from typing import Sequence

KINDS = ("inv_sqrt", "inv")


def weights(p_hats: Sequence[float], kind: str = "inv_sqrt", eps: float = 1e-6) -> list[float]:
    if kind not in KINDS:
        raise ValueError(f"unknown weight kind {kind!r}: expected inv_sqrt or inv")
    out = []
    for p in p_hats:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"pass rate estimate {p} outside [0, 1]")
        q = max(p, eps)
        out.append(1.0 / math.sqrt(q) if kind == "inv_sqrt" else 1.0 / q)
    return out


def allocate(p_hats: Sequence[float], total: int, n_min: int, n_max: int, kind: str = "inv_sqrt") -> list[int]:
    """Integer budgets n_i in [n_min, n_max] with sum == total (see the module docstring for the rule)."""
    b = len(p_hats)
    w = weights(p_hats, kind)
    if b == 0:
        return []
    if n_min > n_max:
        raise ValueError(f"n_min {n_min} > n_max {n_max}")
    if not b * n_min <= total <= b * n_max:
        raise ValueError(f"total {total} cannot be split into {b} budgets within [{n_min}, {n_max}]")
    base = 1 if kind == "inv" and total >= b else 0

    def clip(x: float) -> float:
        return min(max(x, n_min), n_max)

    def filled(scale: float) -> float:
        return sum(clip(base + scale * wi) for wi in w)

    lo, hi = 0.0, n_max / min(w)  # filled(lo) = b*clip(base) <= total <= b*n_max = filled(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        if filled(mid) < total:
            lo = mid
        else:
            hi = mid
    # The bisection fixes which prompts are clipped; the free ones then share what is left exactly,
    # in closed form (the public code's expression: left * (w_i / sum of free w)), with no bisection noise.
    pinned = {i: clip(base + hi * wi) for i, wi in enumerate(w) if clip(base + hi * wi) != base + hi * wi}
    free = [i for i in range(b) if i not in pinned]
    left = total - sum(pinned.values()) - base * len(free)
    w_free = sum(w[i] for i in free)
    n = [0] * b
    rem = [0.0] * b  # fractional part of each free prompt's share (the public code's largest-remainder key)
    for i in range(b):
        if i in pinned:
            n[i] = int(pinned[i])
            continue
        share = left * (w[i] / w_free) if w_free > 0 else 0.0
        whole = math.floor(share)
        n[i] = min(max(base + whole, n_min), n_max)
        rem[i] = share - whole if n[i] == base + whole else 0.0
    if kind == "inv":
        order = sorted(range(b), key=lambda i: (-rem[i], i))
    else:
        order = sorted(range(b), key=lambda i: (-rem[i], -w[i], i))
    deficit = total - sum(n)
    while deficit > 0:  # hand out the remaining units by largest remainder
        for i in order:
            if deficit == 0:
                break
            if n[i] < n_max:
                n[i] += 1
                deficit -= 1
    for i in reversed(order):  # float slack the other way (rare): take from the smallest remainder
        if deficit >= 0:
            break
        if n[i] > n_min:
            n[i] -= 1
            deficit += 1
    assert sum(n) == total, (n, total)
    return n
