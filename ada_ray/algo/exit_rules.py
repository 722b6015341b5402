"""Exit rules: when a prompt stops being sampled (checked at round boundaries only).

fixed   - one round of exactly n samples (grpo, dapo, ada_est's allocated round);
pos     - |pos| >= K_pos (Reinforce-Ada-Seq-pos, default K_pos = 1);
balance - |pos| >= K_pos and |neg| >= K_neg (Seq-balance and ada_budget, defaults floor(n/2) and
          n - floor(n/2)).
A rule also needs the pool to hold at least n samples, so the kept group has exactly n (a no-op
when samples_per_round >= n, as in the paper). The round cap ends every prompt after R rounds.

Deliberate difference from the official code when samples_per_round < n: the official Seq-pos
("positive_focused") stops a prompt at the end of the first round that has a positive and keeps
whatever the pool holds, i.e. fewer than n rows (M = 2, n = 4, a positive in round 1: 2 rows).
Here Seq-pos keeps sampling until the pool has >= n samples (and >= K_pos positives), so every
prompt trains exactly n rows and the batch stays B x n. Seq-balance with the default K_pos + K_neg
= n already implies a pool of >= n, so only K_pos + K_neg < n (not possible in the official code)
is affected there. With samples_per_round >= n (the paper's M = 8, n = 4) both agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ada_ray.knob_defaults import effective_k_neg, effective_k_pos

if TYPE_CHECKING:
    from ada_ray.config import AlgoConfig


@dataclass(frozen=True)
class ExitRule:
    kind: str  # fixed | pos | balance
    n: int
    k_pos: int = 0
    k_neg: int = 0
    max_rounds: int = 1

    def satisfied(self, num_pos: int, num_neg: int) -> bool:
        """Whether the rule fires for a pool with these counts (ignoring the round cap).

        Never before the pool holds n samples (see the module docstring: the official Seq-pos fires
        on the first positive even with fewer)."""
        if num_pos + num_neg < self.n:
            return False
        if self.kind == "fixed":
            return True
        if self.kind == "pos":
            return num_pos >= self.k_pos
        if self.kind == "balance":
            return num_pos >= self.k_pos and num_neg >= self.k_neg
        raise ValueError(f"unknown exit rule kind {self.kind!r}")

    def done(self, num_pos: int, num_neg: int, rounds_done: int) -> bool:
        """Whether sampling of this prompt ends after `rounds_done` completed rounds."""
        return self.satisfied(num_pos, num_neg) or rounds_done >= self.max_rounds


def exit_rule_for(algo: AlgoConfig) -> ExitRule:
    if algo.name == "ada_seq_pos":
        return ExitRule("pos", algo.n, effective_k_pos(algo), 0, algo.max_rounds)
    if algo.name in ("ada_seq_balance", "ada_budget"):
        return ExitRule("balance", algo.n, effective_k_pos(algo), effective_k_neg(algo), algo.max_rounds)
    # grpo / dapo / ada_est: a single round whose size is decided up front
    return ExitRule("fixed", 1, 0, 0, 1)
