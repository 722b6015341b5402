import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ada_ray.algo.allocation import allocate


def test_uniform_when_estimates_equal():
    assert allocate([0.1] * 4, 32, 2, 32) == [8, 8, 8, 8]


def test_inv_sqrt_worked_example():
    # weights 1/sqrt(p): 1/0.5=2, 1/0.25... p = [0.25, 1.0] -> w = [2, 1]; total 12 -> [8, 4]
    assert allocate([0.25, 1.0], 12, 1, 32) == [8, 4]
    # inv (public code): one each, then the other 8 split by 1/p: w = [4, 1] -> shares [6.4, 1.6]
    # -> [1 + 6, 1 + 1] plus the leftover unit to the larger fraction (0.6) -> [7, 3]
    assert allocate([0.25, 1.0], 10, 1, 32, kind="inv") == [7, 3]


def _public_inv(p_hats, total):
    """The public code's rule, restated from reinforce_ada_notes.md 2.1: one sample each, the rest
    split proportionally to 1/max(p, 1e-6), floor + largest remainder (stable: ties to the lower index)."""
    b = len(p_hats)
    w = [1.0 / max(p, 1e-6) for p in p_hats]
    w_sum = sum(w)
    shares = [(total - b) * (wi / w_sum) for wi in w]
    n = [1 + math.floor(x) for x in shares]
    by_fraction = sorted(range(b), key=lambda i: -(shares[i] - math.floor(shares[i])))
    for i in by_fraction[: total - sum(n)]:
        n[i] += 1
    return n


def test_inv_gives_one_each_first_like_the_public_code():
    # differential-test case: p_hat = [0.5596, 0.0391], 8 per prompt (16). w = 1/p = [1.787, 25.575];
    # plain proportionality would give 16 * w / sum(w) = [1.045, 14.955] -> [1, 15]; the public code
    # gives 1 each and splits the other 14: [0.914, 13.086] -> [1 + 0 + 1, 1 + 13] = [2, 14]
    assert allocate([0.5596, 0.0391], 16, 1, 32, kind="inv") == [2, 14]
    assert _public_inv([0.5596, 0.0391], 16) == [2, 14]
    # inv_sqrt (paper) is plain proportionality to 1/sqrt(p): 16 * [0.209, 0.791] -> [3, 13]
    assert allocate([0.5596, 0.0391], 16, 1, 32) == [3, 13]
    # with the project's default est_n_min = 2 the first prompt sits at the floor: still [2, 14]
    assert allocate([0.5596, 0.0391], 16, 2, 32, kind="inv") == [2, 14]


def test_inv_tie_goes_to_lower_index_like_the_public_code():
    # p = [0.75, 0.25]: w = [4/3, 4]; the 2 units beyond one each split [0.5, 1.5]: equal fractions,
    # the public code's stable sort gives the leftover unit to index 0 -> [2, 2]
    assert allocate([0.75, 0.25], 4, 1, 32, kind="inv") == [2, 2] == _public_inv([0.75, 0.25], 4)


def test_inv_clipping_then_one_each_for_the_free_prompts():
    # p = [0.01, 0.25, 0.5], total 20, n_max 10: the first is capped at 10; the other two get 1 each
    # and share the remaining 8 by w = [4, 2]: [5.33, 2.67] -> [6, 3] + leftover to 0.67 -> [6, 4].
    # (Plain proportionality would give 10 * [2/3, 1/3] -> [7, 3].)
    assert allocate([0.01, 0.25, 0.5], 20, 1, 10, kind="inv") == [10, 6, 4]


@given(
    st.lists(st.one_of(st.floats(0.0, 1.0, allow_nan=False),
                       st.builds(lambda k, m: (1 + k) / (17 + m), st.integers(0, 8), st.integers(0, 16))),
             min_size=1, max_size=30),
    st.integers(1, 16),
)
def test_inv_matches_public_code_when_no_clip_binds(p_hats, per_prompt):
    total = per_prompt * len(p_hats)
    assert allocate(p_hats, total, 1, total, kind="inv") == _public_inv(p_hats, total)


def test_clipping_redistributes_to_others():
    # p = [0.01, 0.5, 0.5]: w ~ [10, 1.41, 1.41]; n_max = 10 caps the first, the rest share 14
    assert allocate([0.01, 0.5, 0.5], 24, 2, 10) == [10, 7, 7]


def test_largest_remainder_rounding():
    # w = 1/sqrt(p) with p = [0.25, 0.25, 1.0] -> [2, 2, 1], total 7 -> [2.8, 2.8, 1.4] -> [3, 3, 1]
    assert allocate([0.25, 0.25, 1.0], 7, 1, 10) == [3, 3, 1]


def test_infeasible_total_raises():
    with pytest.raises(ValueError):
        allocate([0.1, 0.2], 100, 2, 32)


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=40),
    st.integers(1, 4), st.integers(0, 28), st.sampled_from(["inv_sqrt", "inv"]), st.data(),
)
def test_allocation_invariants(p_hats, n_min, span, kind, data):
    n_max = n_min + span
    total = data.draw(st.integers(len(p_hats) * n_min, len(p_hats) * n_max))
    n = allocate(p_hats, total, n_min, n_max, kind)
    assert sum(n) == total  # exact budget
    assert all(n_min <= x <= n_max for x in n)
    for i in range(len(p_hats)):  # harder prompts never get fewer samples
        for j in range(len(p_hats)):
            if p_hats[i] < p_hats[j] and max(p_hats[i], 1e-6) < max(p_hats[j], 1e-6):
                assert n[i] >= n[j]
