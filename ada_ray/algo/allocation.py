"""Budget allocation for Reinforce-Ada-Est: n_i proportional to w(p_hat_i), exact total.

w = 1/sqrt(p) (paper, "inv_sqrt") or 1/p ("inv", the public code). Each n_i is clipped to
[n_min, n_max]; the clip is done by water-filling (a scale s with sum_i clip(s*w_i) = total), then
integer rounding by largest remainder so that sum_i n_i == total exactly. Ties go to the larger
weight, then to the lower index, so the result is deterministic and monotone in p_hat.
"""

from __future__ import annotations

import math
from typing import Sequence


def weights(p_hats: Sequence[float], kind: str = "inv_sqrt", eps: float = 1e-6) -> list[float]:
    out = []
    for p in p_hats:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"pass rate estimate {p} outside [0, 1]")
        q = max(p, eps)
        out.append(1.0 / math.sqrt(q) if kind == "inv_sqrt" else 1.0 / q)
    if kind not in ("inv_sqrt", "inv"):
        raise ValueError(f"unknown weight kind {kind!r}: expected inv_sqrt or inv")
    return out


def allocate(p_hats: Sequence[float], total: int, n_min: int, n_max: int, kind: str = "inv_sqrt") -> list[int]:
    """Integer budgets n_i in [n_min, n_max] with sum == total, proportional to w(p_hat) in between."""
    b = len(p_hats)
    if b == 0:
        return []
    if n_min > n_max:
        raise ValueError(f"n_min {n_min} > n_max {n_max}")
    if not b * n_min <= total <= b * n_max:
        raise ValueError(f"total {total} cannot be split into {b} budgets within [{n_min}, {n_max}]")
    w = weights(p_hats, kind)

    def filled(scale: float) -> float:
        return sum(min(max(scale * wi, n_min), n_max) for wi in w)

    lo, hi = 0.0, n_max / min(w)  # filled(lo) = b*n_min <= total <= b*n_max = filled(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        if filled(mid) < total:
            lo = mid
        else:
            hi = mid
    target = [min(max(hi * wi, n_min), n_max) for wi in w]
    base = [min(max(int(math.floor(t + 1e-9)), n_min), n_max) for t in target]
    rem = [t - x for t, x in zip(target, base)]
    deficit = total - sum(base)
    order = sorted(range(b), key=lambda i: (-rem[i], -w[i], i))
    while deficit > 0:  # hand out the remaining units by largest remainder
        for i in order:
            if deficit == 0:
                break
            if base[i] < n_max:
                base[i] += 1
                deficit -= 1
    for i in reversed(order):  # float slack the other way (rare): take from the smallest remainder
        if deficit >= 0:
            break
        if base[i] > n_min:
            base[i] -= 1
            deficit += 1
    assert sum(base) == total, (base, total)
    return base
