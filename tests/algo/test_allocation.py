import pytest
from hypothesis import given
from hypothesis import strategies as st

from ada_ray.algo.allocation import allocate


def test_uniform_when_estimates_equal():
    assert allocate([0.1] * 4, 32, 2, 32) == [8, 8, 8, 8]


def test_inv_sqrt_worked_example():
    # weights 1/sqrt(p): 1/0.5=2, 1/0.25... p = [0.25, 1.0] -> w = [2, 1]; total 12 -> [8, 4]
    assert allocate([0.25, 1.0], 12, 1, 32) == [8, 4]
    # 1/p: w = [4, 1]; total 10 -> [8, 2]
    assert allocate([0.25, 1.0], 10, 1, 32, kind="inv") == [8, 2]


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
