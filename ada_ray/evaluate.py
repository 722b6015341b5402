"""Evaluation metrics: avg@k, pass@k (unbiased estimator), per-difficulty breakdown, and the
pass-rate histogram that says which regime a policy is in (how many GRPO groups would be all wrong).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from math import comb
from typing import Sequence

HIST_BINS = ("0", "(0,0.25]", "(0.25,0.75]", "(0.75,1)", "1")


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples with c correct is correct)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def histogram(rates: Sequence[float]) -> dict[str, float]:
    counts = dict.fromkeys(HIST_BINS, 0)
    for r in rates:
        if r <= 0.0:
            counts["0"] += 1
        elif r <= 0.25:
            counts["(0,0.25]"] += 1
        elif r <= 0.75:
            counts["(0.25,0.75]"] += 1
        elif r < 1.0:
            counts["(0.75,1)"] += 1
        else:
            counts["1"] += 1
    total = max(1, len(rates))
    return {k: v / total for k, v in counts.items()}


def all_equal_share(rates: Sequence[float], n: int = 4) -> tuple[float, float]:
    """Expected share of all-wrong and of all-right groups of n samples, given per-prompt rates."""
    m = max(1, len(rates))
    return sum((1 - p) ** n for p in rates) / m, sum(p**n for p in rates) / m


@dataclass
class EvalResult:
    k: int
    num_prompts: int
    avg_at_k: float
    pass_at_k: float
    pass_at_1: float
    by_difficulty: dict[str, dict[str, float]] = field(default_factory=dict)
    histogram: dict[str, float] = field(default_factory=dict)
    all_wrong_n4: float = 0.0
    all_right_n4: float = 0.0
    reward_errors: int = 0
    correct: list[int] = field(default_factory=list)  # per prompt, in the order evaluated

    def metrics(self, prefix: str = "eval/") -> dict[str, float]:
        out = {f"{prefix}avg@{self.k}": self.avg_at_k, f"{prefix}pass@{self.k}": self.pass_at_k,
               f"{prefix}pass@1": self.pass_at_1, f"{prefix}all_wrong_n4": self.all_wrong_n4}
        for d, m in self.by_difficulty.items():
            out[f"{prefix}avg@{self.k}/{d}"] = m["avg"]
        return out


def summarize(difficulties: Sequence[str], correct: Sequence[int], k: int, reward_errors: int = 0) -> EvalResult:
    """`correct[i]` of `k` samples of prompt i were right."""
    rates = [c / k for c in correct]
    m = max(1, len(rates))
    by: dict[str, list[int]] = defaultdict(list)
    for d, c in zip(difficulties, correct):
        by[d or "all"].append(c)
    aw, ar = all_equal_share(rates, 4)
    return EvalResult(
        k=k, num_prompts=len(rates), avg_at_k=sum(rates) / m,
        pass_at_k=sum(pass_at_k(k, c, k) for c in correct) / m,
        pass_at_1=sum(pass_at_k(k, c, 1) for c in correct) / m,
        by_difficulty={d: {"avg": sum(cs) / (k * len(cs)), "pass": sum(pass_at_k(k, c, k) for c in cs) / len(cs),
                           "prompts": float(len(cs))} for d, cs in sorted(by.items())},
        histogram=histogram(rates), all_wrong_n4=aw, all_right_n4=ar, reward_errors=reward_errors,
        correct=list(correct),
    )


def eval_seed(seed: int, index: int) -> int:
    """The sampling seed of the prompt at `index` of an evaluation (or prepare-data) pass: the same
    for the CLI, the in-training eval spread over samplers, and prepare-data."""
    return seed * 1_000_003 + index


def count_correct(engine, token_ids: Sequence[Sequence[int]], answers: Sequence[str], k: int, temperature: float,
                  seed: int, first_index: int, scorer, threshold: float = 0.5,
                  max_tokens: int | None = None) -> tuple[list[int], int]:
    """(correct of k per prompt, reward errors): k samples per prompt from a generation engine
    (VLLMEngine), scored by a SafeScorer; a sample is correct when its reward exceeds `threshold`.
    Prompt i's seed is eval_seed(seed, first_index + i), so the same weights, seed and prompt
    position give the same samples however the prompts are chunked."""
    outs = engine.generate(token_ids, k, [eval_seed(seed, first_index + i) for i in range(len(token_ids))],
                           temperature, max_tokens)
    correct, errors = [], 0
    for answer, comps in zip(answers, outs):
        scored = scorer.score([c.text for c in comps], [answer] * len(comps))
        errors += sum(1 for _, failed in scored if failed)
        correct.append(sum(1 for s, _ in scored if s > threshold))
    return correct, errors


def evaluate_engine(engine, prompts, k: int, temperature: float, seed: int, scorer,
                    max_tokens: int | None = None, batch: int = 256) -> EvalResult:
    """avg@k, pass@k and the rest over `prompts` (Prompt objects), in chunks of `batch` prompts."""
    correct: list[int] = []
    errors = 0
    for start in range(0, len(prompts), batch):
        chunk = prompts[start:start + batch]
        c, e = count_correct(engine, [p.token_ids for p in chunk], [p.answer for p in chunk], k, temperature, seed,
                             start, scorer, max_tokens=max_tokens)
        correct += c
        errors += e
    return summarize([p.difficulty for p in prompts], correct, k, errors)


def format_result(res: EvalResult) -> str:
    lines = [f"prompts {res.num_prompts}  avg@{res.k} {res.avg_at_k:.4f}  pass@{res.k} {res.pass_at_k:.4f}  "
             f"pass@1 {res.pass_at_1:.4f}",
             "pass-rate histogram: " + "  ".join(f"{b}: {v:.3f}" for b, v in res.histogram.items()),
             f"expected share of all-wrong groups at n=4: {res.all_wrong_n4:.3f} (all-right {res.all_right_n4:.3f})"]
    for d, m in res.by_difficulty.items():
        lines.append(f"  {d:>8}: avg {m['avg']:.3f}  pass@{res.k} {m['pass']:.3f}  ({int(m['prompts'])} prompts)")
    if res.reward_errors:
        lines.append(f"reward errors (scored 0): {res.reward_errors}")
    return "\n".join(lines)
