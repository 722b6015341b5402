"""Reward plug-ins used by the tests (loaded by module name, as users' plug-ins are)."""

import time


def constant_half(completion, answer):
    return 0.5


def raises(completion, answer):
    raise RuntimeError("boom")


def not_a_number(completion, answer):
    return "yes"


def nan(completion, answer):
    return float("nan")


def hangs_on_hang(completion, answer):
    if completion == "hang":
        time.sleep(3600)
    return 1.0


def huge(completion, answer):
    """Finite but overflowing: makes the loss non-finite (bad-input row 17)."""
    return 1e308


def starts_with_7(completion, answer):
    """A reward the policy can learn in a few dozen steps (learning test): answers that start with 7."""
    return 1.0 if completion.strip().startswith("7") else 0.0
