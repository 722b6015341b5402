"""Exact-match verifier: the stripped completion equals the stripped answer."""

from __future__ import annotations


def exact_match(completion: str, answer: str) -> float:
    return 1.0 if completion.strip() == str(answer).strip() else 0.0
