"""Posterior budgets (`algo.name = ada_budget`): how many samples a prompt gets, read from what the
difficulty memory knows of it.

The memory (estimator.py) keeps each prompt's decayed counts (N, N_pos) across steps and epochs.
With the budget's own prior Beta(a0, b0) (`algo.budget_prior`, default uniform; the Est prior
Beta(1, 16) is tuned for 1/p budgets and would call every fresh prompt hard) they are a posterior
Beta(N_pos + pos + a0, N - N_pos + neg + b0) over the prompt's pass rate, where pos / neg are the
samples already in this step's pool. Under it the positives among m more samples are Beta-binomial, and

    settle_probability = P(the exit rule fires within m more samples)

(|pos| >= K_pos, |neg| >= K_neg and a pool of >= n). Three rules read it, all pure and deterministic:

- `round_size`: the smallest m in [lo, hi] with settle_probability >= `algo.settle_target`, else hi:
  most prompts settle in one round, sized to their difficulty; a prompt with no history gets the
  paper's round of M (`algo.samples_per_round`).
- `hopeless`: settle_probability within the prompt's whole cap (`algo.budget_max_samples`) is below
  `algo.park_below`. A prompt seen before that is hopeless is *parked*: skipped when the data cursor
  reaches it, except with probability `algo.explore_floor` (decided by a hash of seed, prompt and
  cohort), so it comes back and is re-measured as the policy improves. This one rule retires prompts
  the policy always solves (no negative within reach) and, with probes off, parks those it never
  solves (no positive within reach).
- a top-up after an unfired round: sized by `round_size` over what is left of the cap, and only while
  the prompt is not hopeless given its pool; at most `algo.max_rounds` rounds in all.

Parking the never-solved prompts costs the policy coverage (BENCHMARKS.md: held-out pass@16 falls below
the base model's, on the prompts it solved rarely). Two settings keep it:

- `algo.park_need = pair`: a prompt is parked only when not even one pair (a positive and a negative,
  the least that carries a signal) is within reach of the cap, instead of the whole exit rule.
- `algo.probe_samples = k > 0`: a prompt out of reach that the policy fails (`mostly_wrong`: posterior
  mean below 1/2) is not parked but drawn with one *probe* round of k samples; a rare success in it is
  the signal that keeps hard prompts solvable, and it earns a top-up like any round. Prompts the policy
  always solves are still retired (parked) the same way. k = 4 = n (GRPO-n4's price for those
  prompts) kept held-out pass@16 where `pair` did not (BENCHMARKS.md); off by default (it gives up
  avg@16 at equal wall-clock).
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache


def beta_binomial_pmf(m: int, a: float, b: float) -> list[float]:
    """P(X = x) for x = 0..m, X ~ BetaBinomial(m, a, b): P(0) in closed form, then the ratio
    P(x+1) / P(x) = (m-x)(x+a) / ((x+1)(m-x-1+b))."""
    if m < 0 or a <= 0 or b <= 0:
        raise ValueError(f"beta-binomial needs m >= 0 and a, b > 0 (got m={m}, a={a}, b={b})")
    p = math.exp(math.lgamma(m + b) + math.lgamma(a + b) - math.lgamma(b) - math.lgamma(m + a + b))
    out = [p]
    for x in range(m):
        p *= (m - x) * (x + a) / ((x + 1) * (m - x - 1 + b))
        out.append(p)
    return out


@lru_cache(maxsize=65536)
def settle_probability(m: int, a: float, b: float, need_pos: int, need_neg: int, need_total: int = 0) -> float:
    """P(at least `need_pos` positives and `need_neg` negatives among m more samples, and m >= need_total),
    the pass rate ~ Beta(a, b)."""
    if m < need_total or need_pos + need_neg > m:
        return 0.0
    pmf = beta_binomial_pmf(m, a, b)
    return min(1.0, sum(pmf[need_pos:m - need_neg + 1]))


def posterior(counts: tuple[float, float], pool_pos: int, pool_neg: int, prior: tuple[float, float]) -> tuple[float, float]:
    """Beta(a, b) over a prompt's pass rate: the memory's decayed (N, N_pos), this step's pool, the prior."""
    n, k = counts
    return k + pool_pos + prior[0], max(0.0, n - k) + pool_neg + prior[1]


def needs(k_pos: int, k_neg: int, n: int, pool_pos: int, pool_neg: int) -> tuple[int, int, int]:
    """What more samples must bring for the exit rule to fire: (positives, negatives, samples)."""
    return max(0, k_pos - pool_pos), max(0, k_neg - pool_neg), max(0, n - pool_pos - pool_neg)


def round_size(a: float, b: float, need: tuple[int, int, int], lo: int, hi: int, target: float) -> int:
    """The smallest m in [lo, hi] with settle_probability(m) >= target; hi when none reaches it."""
    lo = max(lo, need[2], need[0] + need[1], 1)
    for m in range(lo, hi + 1):
        if settle_probability(m, round(a, 6), round(b, 6), *need) >= target:
            return m
    return hi


def hopeless(a: float, b: float, need: tuple[int, int, int], cap: int, park_below: float) -> bool:
    """Whether even `cap` more samples fire the rule with probability below `park_below`."""
    if cap <= 0:
        return True
    return settle_probability(cap, round(a, 6), round(b, 6), *need) < park_below


def pair_need(need: tuple[int, int, int]) -> tuple[int, int, int]:
    """The least of `need` that still carries a signal: one positive and one negative (each only if
    still needed); no sample count."""
    return min(need[0], 1), min(need[1], 1), 0


def mostly_wrong(a: float, b: float) -> bool:
    """The posterior's mean pass rate is below 1/2."""
    return a < b


def explores(seed: int, prompt_id: str, cohort: int, floor: float) -> bool:
    """The exploration draw for a parked prompt: True (draw it anyway) with probability `floor`,
    the same answer for the same (seed, prompt, cohort) on every machine."""
    h = hashlib.blake2b(f"park|{seed}|{prompt_id}|{cohort}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64 < floor
