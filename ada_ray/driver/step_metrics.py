"""Per-step metrics. `cohort_metrics` (pure): what the paper's analysis needs from a completed
cohort; `SystemMeter`: the step's sampler, queue, timing and throughput figures, from the stats the
runtime hands over; `StepTimer`: the wall-clock split of a step.

round0_reward is the training reward (the first round's samples per prompt; the kept batch is
~50% positive by construction for ada_seq_balance and says nothing about the policy).
"""

from __future__ import annotations

import time
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
        # the waste to drive down: the share of the step's samples drawn for prompts that ended with no signal
        "train/no_signal_sample_share": no_signal_sample_share(everything),
        "train/prompts_skipped": float(res.skipped),
        "train/first_round_samples": _mean([float(len(g.round0_rewards)) for g in everything]),
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
        "train/completion_tokens_mean": _mean([float(s.num_tokens) for g in groups for s in g.samples]),
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


def no_signal_sample_share(groups) -> float:
    """Samples drawn for groups with no signal (all kept rewards equal) over all samples drawn."""
    total = sum(g.pool_size for g in groups)
    return sum(g.pool_size for g in groups if g.zero_signal) / total if total else 0.0


def pool_pass_rates(res: CohortResult) -> list[float]:
    """Per-prompt pass rate over its whole pool (the p-hat histogram)."""
    return [g.pool_positives / g.pool_size for g in list(res.groups) + list(res.dropped) if g.pool_size]


class StepTimer:
    """Wall-clock split of a step into named parts."""

    def __init__(self):
        self.t = time.perf_counter()
        self.parts: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self.t
        self.t = now


def sampler_deltas(prev: list[dict], cur: list[dict]) -> dict[str, float]:
    busy = sum(c["busy_s"] - p["busy_s"] for p, c in zip(prev, cur))
    idle = sum(c["idle_s"] - p["idle_s"] for p, c in zip(prev, cur))
    upd = sum(c["update_s"] - p["update_s"] for p, c in zip(prev, cur))
    tokens = sum(c["tokens"] - p["tokens"] for p, c in zip(prev, cur))
    total = busy + idle + upd
    return {"sampler/idle_ratio": idle / total if total > 0 else 0.0, "sampler/tokens": float(tokens),
            "sampler/busy_s": busy, "sampler/idle_s": idle}


class SystemMeter:
    """The system side of a step's metrics: it keeps the previous step's sampler stats, so each
    `read` reports this step's deltas (idle ratio, tokens) next to the running totals."""

    def __init__(self, rt):
        self.rt = rt
        self.prev = rt.sampler_stats()
        self.t_start = time.time()

    def read(self, timer: StepTimer, m: dict) -> dict[str, float]:
        """This step's figures; `m` must already hold train/groups and the learner's metrics."""
        cur = self.rt.sampler_stats()
        out = sampler_deltas(self.prev, cur)
        self.prev = cur
        for i, st in enumerate(cur):
            out[f"sampler/{i}/samples_total"] = float(st["samples"])
            out[f"sampler/{i}/version"] = float(st["version"])
            # queue calls: lease calls of its own and report calls, and how many reports carried a lease ask
            for k in ("lease_calls", "report_calls", "asks_on_reports"):
                out[f"sampler/{i}/{k}_total"] = float(st.get(k, 0))
        out["sampler/replaced_total"] = float(self.rt.replaced)
        q = self.rt.queue_stats()
        out.update({"queue/busy_s_total": q["busy_s"], "queue/calls_total": float(q["calls"]),
                    "queue/prompts_reissued_total": float(q.get("prompts_reissued", 0)),
                    "queue/relayed_calls_total": float(q.get("relayed_calls", 0)),
                    "time/elapsed": self.elapsed()})
        step_s = sum(timer.parts.values())
        out.update({f"time/{k}": v for k, v in timer.parts.items()})
        out.update({"time/step": step_s, "perf/groups_per_s": m["train/groups"] / step_s,
                    "perf/tokens_per_s": out["sampler/tokens"] / step_s,
                    "learner/idle_ratio": max(0.0, 1.0 - m.get("learner/train_seconds", 0.0) / step_s)})
        return out

    def elapsed(self) -> float:
        return time.time() - self.t_start
