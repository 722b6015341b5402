import time

import pytest

from ada_ray.rewards import SafeScorer, load_reward
from ada_ray.rewards.exact import exact_match
from ada_ray.rewards.math_verify_reward import last_boxed, math_reward


def test_exact_match():
    assert exact_match(" 42 ", "42") == 1.0 and exact_match("42.0", "42") == 0.0


@pytest.mark.parametrize("text,content", [
    ("so \\boxed{1/2}", "1/2"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("nested \\boxed{\\{1,2\\}}", "\\{1,2\\}"),
    ("no box here", None),
    ("unclosed \\boxed{3", None),
    ("\\fbox{7}", "7"),
])
def test_last_boxed(text, content):
    assert last_boxed(text) == content


@pytest.mark.parametrize("completion,answer,expected", [
    ("The answer is \\boxed{\\frac{1}{2}}", "1/2", 1.0),
    ("\\boxed{0.5}", "\\frac12", 1.0),
    ("\\boxed{\\dfrac{3}{4}}", "0.75", 1.0),
    ("\\boxed{[1,2)}", "[1,2)", 1.0),
    ("\\boxed{(1,2)}", "[1,2)", 0.0),
    ("\\boxed{5\\text{ cm}}", "5", 1.0),
    ("first \\boxed{3} final \\boxed{4}", "4", 1.0),
    ("first \\boxed{4} final \\boxed{3}", "4", 0.0),
    ("no box, 4", "4", 0.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{7}", "\\boxed{7}", 1.0),
])
def test_math_reward(completion, answer, expected):
    assert math_reward(completion, answer) == expected


def test_load_reward_specs():
    assert load_reward("exact") is exact_match
    assert load_reward("tests.rewards.plugins:constant_half")("a", "b") == 0.5
    for bad in ("nope", "no.such.module:fn", "tests.rewards.plugins:missing"):
        with pytest.raises(ValueError):
            load_reward(bad)


def test_safe_scorer_inline_counts_errors_and_junk():
    s = SafeScorer("tests.rewards.plugins:raises")
    assert s.score(["a", "b"], ["x", "y"]) == [(0.0, True), (0.0, True)]
    assert s.stats.errors == 2 and "boom" in s.last_error
    s = SafeScorer("tests.rewards.plugins:not_a_number")
    assert s.score(["a"], ["x"]) == [(0.0, True)] and s.stats.invalid == 1
    s = SafeScorer("tests.rewards.plugins:nan")
    assert s.score(["a"], ["x"]) == [(0.0, True)] and s.stats.invalid == 1


def test_safe_scorer_pool_bounds_a_hang_and_recovers():
    s = SafeScorer("tests.rewards.plugins:hangs_on_hang", timeout_s=1.0, workers=1)
    try:
        t0 = time.monotonic()
        out = s.score(["hang", "ok"], ["1", "1"])
        assert time.monotonic() - t0 < 10
        assert out[0] == (0.0, True) and s.stats.timeouts >= 1
        assert s.score(["ok"], ["1"]) == [(1.0, False)]  # a fresh pool after the hang
        s2 = SafeScorer("math", timeout_s=5.0, workers=1)
        assert s2.score(["\\boxed{2}"], ["2"]) == [(1.0, False)]
        s2.close()
    finally:
        s.close()
