"""Turning a cohort of groups into the learners' input: rows, mini-batches, data-parallel shares.

Mini-batch j takes groups j, j+M, j+2M, ... (M = learner.mini_batches, each one optimizer step);
inside a mini-batch, groups go to the learner with the fewest tokens so far (largest first), so
data-parallel ranks do similar work. Every share carries the mini-batch's global token and
sequence counts: the loss denominators that make data-parallel token-mean exact.

A sample whose payload is off the control plane becomes a row with `payload` = (PayloadBatch, row)
and no completion yet: the learner fetches every batch of its share in one call (`fill_rows`) before
it trains, so the token ids go from the sampler's object store to the learner and nowhere else.
"""

from __future__ import annotations

from typing import Sequence

from ada_ray.algo.payloads import distinct_batches, row_arrays
from ada_ray.algo.types import Group, PayloadBatch, Sample


def group_rows(g: Group) -> list[dict]:
    return [_row(g, s, a) for s, a in zip(g.samples, g.advantages)]


def _row(g: Group, s: Sample, a: float) -> dict:
    r = {"prompt": list(g.prompt_ids), "advantage": float(a), "version": int(s.version)}
    if s.remote:
        r["payload"] = (s.payload[0], s.payload[1])
    else:
        r["completion"], r["behaviour_logprobs"] = list(s.completion_ids), list(s.behaviour_logprobs)
    return r


def _tokens(g: Group) -> int:
    return sum(s.num_tokens for s in g.samples)


def share_batches(share: Sequence[tuple[list[dict], float, float]]) -> list[PayloadBatch]:
    """The distinct payload batches a learner's share needs."""
    return distinct_batches(r["payload"][0] for rows, _, _ in share for r in rows if "payload" in r)


def fill_rows(share: Sequence[tuple[list[dict], float, float]], fetched: dict[str, dict]) -> None:
    """Each row's completion and behaviour log-probs from the fetched batches (in place)."""
    for rows, _, _ in share:
        for r in rows:
            if "payload" in r:
                batch, i = r.pop("payload")
                ids, lps, _ = row_arrays(fetched[batch.key], i)
                r["completion"], r["behaviour_logprobs"] = ids.tolist(), lps.tolist()


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
