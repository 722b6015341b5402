import math

import pytest

from ada_ray.algo.advantages import est_advantages, group_advantages, is_zero_signal, pool_advantages


def test_balance_3_of_24_worked_example():
    # ALGORITHM.md: 3 positives in a pool of 24, n = 4 -> p_hat = 0.125
    adv = pool_advantages([1, 1, 0, 0], pool_positives=3, pool_size=24)
    assert adv == pytest.approx([0.875, 0.875, -0.125, -0.125])
    assert sum(adv) != pytest.approx(0.0)  # kept advantages need not sum to zero


def test_pool_baseline_all_wrong_is_zero_signal():
    assert pool_advantages([0, 0, 0, 0], 0, 32) == [0.0, 0.0, 0.0, 0.0]


def test_pool_inverse_p_weight_and_guards():
    adv = pool_advantages([1, 1, 0, 0], 3, 24, inverse_p_weight=True)
    assert adv == pytest.approx([7.0, 7.0, -1.0, -1.0])
    assert pool_advantages([0, 0, 0, 0], 0, 32, inverse_p_weight=True) == [0.0] * 4  # p_hat = 0: no NaN
    assert pool_advantages([1, 1, 1, 1], 8, 8, inverse_p_weight=True) == [0.0] * 4  # p_hat = 1


def test_pool_std_normalisation_uses_pool_std():
    adv = pool_advantages([1, 0], 4, 8, norm_by_std=True)
    std = math.sqrt((4 * 0.25 + 4 * 0.25) / 7)
    assert adv == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6)], rel=1e-5)


def test_grpo_mean_and_unbiased_std():
    adv = group_advantages([1, 0, 0, 0], norm_by_std=True)
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 3)
    assert adv == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert group_advantages([1, 0, 0, 0], norm_by_std=False) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert group_advantages([1, 1, 1, 1], norm_by_std=True) == [0.0] * 4  # zero variance stays zero


def test_est_residual_weight():
    # 2 of 8 positive: r_bar = 0.25, weight 1/sqrt(0.25) = 2
    adv = est_advantages([1, 1, 0, 0, 0, 0, 0, 0], 2, residual_weight=True)
    assert adv[:2] == pytest.approx([1.5, 1.5]) and adv[2] == pytest.approx(-0.5)
    assert est_advantages([1, 1, 0, 0], 2, residual_weight=False) == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert est_advantages([0] * 8, 0, residual_weight=True) == [0.0] * 8  # guarded at r_bar = 0


def test_zero_signal():
    assert is_zero_signal([0, 0, 0, 0]) and is_zero_signal([1, 1]) and not is_zero_signal([1, 0])


def test_pool_std_zero_variance_non_binary_rewards_do_not_explode():
    # all-negative pool (threshold 0.7) of non-binary rewards 0.5: p_hat = 0, the binary pool std is 0.
    # Before the guard: 0.5 / (max(0, 1e-6) + 1e-6) = 250,000. A zero-variance pool has no signal -> 0.
    assert pool_advantages([0.5, 0.5, 0.5, 0.5], 0, 8, norm_by_std=True) == [0.0] * 4
    assert pool_advantages([0.5, 0.3, 0.6, 0.1], 0, 32, norm_by_std=True) == [0.0] * 4
    # all-positive pool of rewards 0.8: r - p_hat = -0.2 each, std 0 -> 0 (was -100,000)
    assert pool_advantages([0.8, 0.9, 0.8, 0.75], 8, 8, norm_by_std=True) == [0.0] * 4
    # and with the 1/p_hat weight on top: still 0, no NaN
    assert pool_advantages([0.5] * 4, 0, 8, norm_by_std=True, inverse_p_weight=True) == [0.0] * 4
    # one positive of 8 is the smallest non-zero binary std (1/sqrt(8)): divided as verl does
    adv = pool_advantages([0.9, 0.5], 1, 8, norm_by_std=True)
    assert adv == pytest.approx([(0.9 - 0.125) / (8 ** -0.5 + 1e-6), (0.5 - 0.125) / (8 ** -0.5 + 1e-6)])
    # without norm_by_std nothing changes (the official code's A = r - p_hat)
    assert pool_advantages([0.5, 0.5], 0, 8) == [0.5, 0.5]


def test_grpo_std_guard_on_float_noise_spread():
    # rewards equal up to noise: before the guard [0.5, 0.5 + 1e-5] gave +-0.62; now zero-variance -> 0
    assert group_advantages([0.5, 0.5 + 1e-5], norm_by_std=True) == [0.0, 0.0]
    assert group_advantages([0.3, 0.3 + 2e-5, 0.3 - 3e-5, 0.3], norm_by_std=True) == [0.0] * 4
    # a real spread (>= 1e-4) is still normalised as verl: [0.5, 0.5002] -> +-0.0001/(std + 1e-6)
    std = math.sqrt(2 * 0.0001**2)
    assert group_advantages([0.5, 0.5002], norm_by_std=True) == pytest.approx(
        [-0.0001 / (std + 1e-6), 0.0001 / (std + 1e-6)], rel=1e-6)
    # without normalisation the tiny differences pass through unchanged (no amplification)
    assert group_advantages([0.5, 0.5 + 1e-5], norm_by_std=False) == pytest.approx([-5e-6, 5e-6])
    # DAPO's filter agrees: the groups zeroed above are zero-signal, the real spread is not
    assert is_zero_signal([0.5, 0.5 + 1e-5]) and not is_zero_signal([0.5, 0.5002])
