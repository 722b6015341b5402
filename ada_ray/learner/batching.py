"""Turning a cohort of groups into the learners' input: rows, mini-batches, data-parallel shares.

Mini-batch j takes groups j, j+M, j+2M, ... (M = learner.mini_batches, each one optimizer step);
inside a mini-batch, groups go to the learner with the fewest tokens so far (largest first), so
data-parallel ranks do similar work. Every share carries the mini-batch's global token and
sequence counts: the loss denominators that make data-parallel token-mean exact.
"""

from __future__ import annotations

from typing import Sequence

from ada_ray.algo.types import Group


def group_rows(g: Group) -> list[dict]:
    return [{"prompt": list(g.prompt_ids), "completion": list(s.completion_ids),
             "behaviour_logprobs": list(s.behaviour_logprobs), "advantage": float(a), "version": int(s.version)}
            for s, a in zip(g.samples, g.advantages)]


def _tokens(g: Group) -> int:
    return sum(len(s.completion_ids) for s in g.samples)


def learner_shares(groups: Sequence[Group], num_learners: int, mini_batches: int) -> list[list[tuple[list[dict], float, float]]]:
    """For each learner: [(rows, global tokens, global sequences)] per mini-batch."""
    m = max(1, min(mini_batches, len(groups)))
    shares: list[list[tuple[list[dict], float, float]]] = [[] for _ in range(num_learners)]
    for j in range(m):
        part = list(groups[j::m])
        tokens = float(sum(_tokens(g) for g in part))
        seqs = float(sum(len(g.samples) for g in part))
        load = [0] * num_learners
        rows: list[list[dict]] = [[] for _ in range(num_learners)]
        for g in sorted(part, key=_tokens, reverse=True):
            r = min(range(num_learners), key=lambda i: (load[i], i))
            rows[r].extend(group_rows(g))
            load[r] += _tokens(g)
        for r in range(num_learners):
            shares[r].append((rows[r], tokens, seqs))
    return shares
