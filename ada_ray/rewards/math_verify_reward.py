"""Math verifier: math-verify on the content of the LAST \\boxed{...} of the completion.

No box scores 0. The gold answer may be bare ("1/2", "\\frac{1}{2}") or boxed. math-verify's own
timeouts use SIGALRM, which works only in a process's main thread: run this through SafeScorer
with worker processes (``sampler.reward_workers`` > 0), which also bounds a hang.
"""

from __future__ import annotations

from typing import Optional


def last_boxed(text: str) -> Optional[str]:
    """Content of the last \\boxed{...} (or \\fbox{...}), with nested braces; None if there is none."""
    start = -1
    for tag in ("\\boxed{", "\\fbox{"):
        start = max(start, text.rfind(tag))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    j = i
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
        j += 1
    return None  # unbalanced: the box never closes


def math_reward(completion: str, answer: str, timeout_s: int = 5) -> float:
    from math_verify import parse, verify

    boxed = last_boxed(completion)
    if boxed is None:
        return 0.0
    gold_text = last_boxed(str(answer))
    gold_text = str(answer) if gold_text is None else gold_text
    gold = parse(f"${gold_text}$", parsing_timeout=timeout_s)
    pred = parse(f"\\boxed{{{boxed}}}", parsing_timeout=timeout_s)
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=timeout_s) else 0.0
