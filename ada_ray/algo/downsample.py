"""Downsampling a prompt's pool to the update group of n (Reinforce-Ada-Seq).

First-collected first: the pool keeps positives and negatives in the order they were scored, and
the kept group takes from the front of each list. Target floor(n/2) positives and n - floor(n/2)
negatives, topping up from the other side when one side is short. Unfinished prompts (round cap
hit before the exit rule fired) use the official code's fallback, which differs for the pos rule.
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar

T = TypeVar("T")


def _take(pos: Sequence[T], neg: Sequence[T], n: int, target_pos: int) -> list[T]:
    tp = min(target_pos, len(pos))
    tn = min(n - tp, len(neg))
    short = n - tp - tn
    if short > 0:  # top up from the side with spares, positives first
        extra = min(short, len(pos) - tp)
        tp += extra
        short -= extra
        tn += min(short, len(neg) - tn)
    return [*pos[:tp], *neg[:tn]]


def balanced_downsample(pos: Sequence[T], neg: Sequence[T], n: int) -> list[T]:
    """floor(n/2) positives + the rest negatives, first-collected, topped up from the other side."""
    if n < 1:
        raise ValueError(f"group size n must be >= 1, got {n}")
    return _take(pos, neg, n, n // 2)


def unfinished_downsample(pos: Sequence[T], neg: Sequence[T], n: int, rule_kind: str) -> list[T]:
    """The official fallback for a prompt whose exit rule never fired.

    balance: same split as balanced_downsample.
    pos:     target positives = clip(ceil(|pos| / |pool| * take), 1, take - 1), take = min(n, |pool|).
    """
    pool = len(pos) + len(neg)
    take = min(n, pool)
    if take == 0:
        return []
    if rule_kind == "pos" and take >= 2:
        tp = math.ceil(len(pos) / pool * take)
        tp = max(1, min(tp, take - 1))
        return _take(pos, neg, take, tp)
    return _take(pos, neg, take, take // 2)
