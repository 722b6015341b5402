"""Per-step training metrics from a completed cohort (pure): what the paper's analysis needs.

round0_reward is the training reward (the first round's samples per prompt; the kept batch is
~50% positive by construction for ada_seq_balance and says nothing about the policy).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ada_ray.algo.scheduler import CohortResult


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def cohort_metrics(res: CohortResult, step: int, max_rounds: int) -> dict[str, float]:
    groups = res.groups
    everything = list(groups) + list(res.dropped)
    round0 = [r for g in everything for r in g.round0_rewards]
    kept = [s.reward for g in groups for s in g.samples]
    stale = [step - s.version for g in groups for s in g.samples]
    m: dict[str, float] = {
        "train/round0_reward": _mean(round0),
        "train/kept_reward": _mean(kept),
        "train/zero_signal_share": _mean([1.0 if g.zero_signal else 0.0 for g in groups]),
        "train/groups": float(len(groups)),
        "train/samples_generated": float(res.samples_generated),
        "train/samples_trained": float(len(kept)),
        "train/samples_per_prompt": res.samples_generated / max(1, res.draws),
        "train/round_cap_share": _mean([0.0 if g.exit_fired else 1.0 for g in everything]),
        "train/mean_rounds": _mean([float(g.rounds) for g in everything]),
        "train/staleness_mean": _mean([float(x) for x in stale]),
        "train/staleness_max": float(max(stale)) if stale else 0.0,
        "train/dapo_dropped": float(len(res.dropped)),
        "train/dapo_cap_hit": 1.0 if res.dapo_cap_hit else 0.0,
        "train/reward_errors": float(sum(s.reward_error for g in everything for s in g.samples)),
        "train/completion_tokens_mean": _mean([float(len(s.completion_ids)) for g in groups for s in g.samples]),
    }
    for r in range(1, max_rounds):
        m[f"train/active_after_round_{r}"] = float(sum(1 for g in everything if g.rounds > r))
    from ada_ray.evaluate import histogram

    for b, v in histogram(pool_pass_rates(res)).items():
        m[f"train/phat/{b}"] = v
    by: dict[str, list[float]] = defaultdict(list)
    for g in everything:
        by[g.difficulty or "all"].extend(g.round0_rewards)
    for d, rs in by.items():
        m[f"train/round0_reward/{d}"] = _mean(rs)
    return m


def pool_pass_rates(res: CohortResult) -> list[float]:
    """Per-prompt pass rate over its whole pool (the p-hat histogram)."""
    return [g.pool_positives / g.pool_size for g in list(res.groups) + list(res.dropped) if g.pool_size]
