"""The embedded default task: chain sums from reasoning-gym, graded by difficulty.

A level "TxD" is T terms of D digits joined by + and - (reasoning-gym ``chain_sum`` with
``allow_negation=False``, min = max for both knobs). Prompts are written compactly, "57+38-9=",
and the answer is the integer ("86"). Everything is deterministic by seed: the train and eval splits
are disjoint (no eval expression appears in train), each prompt carries its level as difficulty
label, and the id is a hash of the prompt text (stable across runs and epochs).

Answers are written most-significant digit first ("86", as people write them) or, with
``answer_order="lsb_first"``, least-significant digit first with the sign in front ("-29" -> "-92"):
small transformers learn carry propagation from far fewer examples that way, because each digit
then depends only on the digits already written (Lee et al., ICLR 2024, "Teaching arithmetic to
small transformers").

reasoning-gym seeds item i of a dataset with ``seed + i``, so datasets with nearby seeds overlap;
every (purpose, level) gets its own seed range here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, Sequence

from ada_ray.levels import HELD_OUT_PER_LEVEL, parse_level  # noqa: F401 (re-exported)

LEVEL_SEED_STRIDE = 10_000_000
EVAL_OFFSET = 500_000_000
SFT_OFFSET = 1_000_000_000


ANSWER_ORDERS = ("msb_first", "lsb_first")


def write_answer(answer: str, order: str = "msb_first") -> str:
    """The integer answer as the policy must write it: "-29" -> "-29" (msb_first) or "-92" (lsb_first)."""
    if order == "msb_first":
        return answer
    if order != "lsb_first":
        raise ValueError(f"answer order {order!r}: expected one of {ANSWER_ORDERS}")
    sign, digits = ("-", answer[1:]) if answer.startswith("-") else ("", answer)
    return sign + digits[::-1]


def prompt_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TaskItem:
    prompt_id: str
    question: str  # compact prompt, e.g. "57+38-9="
    answer: str
    difficulty: str  # the level, e.g. "2x2"


def _dataset(level: str, seed: int, size: int):
    import reasoning_gym as rg

    t, d = parse_level(level)
    return rg.create_dataset("chain_sum", min_terms=t, max_terms=t, min_digits=d, max_digits=d,
                             allow_negation=False, seed=seed, size=size)


def _compact(entry: dict) -> str:
    return entry["metadata"]["expression"].replace(" ", "") + "="


def _level_items(level: str, seed: int, want: int, exclude: set[str], max_tries: int,
                 order: str = "msb_first") -> list[TaskItem]:
    ds = _dataset(level, seed, max_tries)
    out: list[TaskItem] = []
    seen = set(exclude)
    for i in range(max_tries):
        entry = ds[i]
        q = _compact(entry)
        if q in seen:
            continue
        seen.add(q)
        out.append(TaskItem(prompt_id(q), q, write_answer(entry["answer"], order), level))
        if len(out) >= want:
            break
    return out


def _level_seed(seed: int, level: str, offset: int) -> int:
    """Seed range of one (purpose, level): depends on the level's name, not its place in a list."""
    t, d = parse_level(level)
    return offset + seed * 7919 * LEVEL_SEED_STRIDE // 1000 + (10 * t + d) * LEVEL_SEED_STRIDE


def distinct_problems(level: str) -> int:
    """How many different prompts a level has (2x1: 10 x 10 x 2 = 200)."""
    t, d = parse_level(level)
    per_operand = 10 if d == 1 else 9 * 10 ** (d - 1)
    return per_operand**t * 2 ** (t - 1)


def held_out_size(level: str) -> int:
    """At most 200 prompts, and at most a quarter of a small level (2x1: 50)."""
    return min(HELD_OUT_PER_LEVEL, distinct_problems(level) // 4)


def held_out(level: str, seed: int, order: str = "msb_first") -> list[TaskItem]:
    """The level's held-out pool; every eval split is a prefix of it."""
    n = held_out_size(level)
    return _level_items(level, _level_seed(seed, level, EVAL_OFFSET), n, set(), 20 * n + 100, order)


def make_splits(levels: Sequence[str], train_per_level: int, eval_per_level: int, seed: int,
                order: str = "msb_first") -> tuple[list[TaskItem], list[TaskItem]]:
    """Deterministic, disjoint (train, eval) lists. Train prompts never come from the held-out pool
    (of which the eval split is a prefix), whatever eval_per_level is. Small levels (2x1 has 200
    distinct problems, so a held-out pool of 50) give fewer prompts than asked rather than duplicates,
    for both splits."""
    train: list[TaskItem] = []
    evals: list[TaskItem] = []
    for level in levels:
        pool = held_out(level, seed, order)
        ev = pool[:eval_per_level]
        tr = _level_items(level, _level_seed(seed, level, 0), train_per_level, {e.question for e in pool},
                          20 * train_per_level + 100, order)
        evals.extend(ev)
        train.extend(tr)
    return train, evals


def score(completion: str, answer: str) -> float:
    """Exact match of the completion (stripped) and the integer answer."""
    return 1.0 if completion.strip() == answer.strip() else 0.0


def sft_stream(levels: Sequence[str], seed: int, exclude: set[str], order: str = "msb_first") -> Iterator[TaskItem]:
    """An endless stream of training examples, levels drawn round-robin in a seeded order,
    skipping the excluded (eval) prompts."""
    import random

    rng = random.Random(seed)
    chunk = 4096
    cursors = {lv: 0 for lv in levels}
    buffers: dict[str, list[TaskItem]] = {lv: [] for lv in levels}
    while True:
        lv = levels[rng.randrange(len(levels))]
        if not buffers[lv]:
            ds = _dataset(lv, _level_seed(seed, lv, SFT_OFFSET) + cursors[lv], chunk)
            cursors[lv] += chunk
            for j in range(chunk):
                e = ds[j]
                q = _compact(e)
                if q not in exclude:
                    buffers[lv].append(TaskItem(prompt_id(q), q, write_answer(e["answer"], order), lv))
            buffers[lv].reverse()
        yield buffers[lv].pop()
