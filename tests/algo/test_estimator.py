import pytest

from ada_ray.algo.estimator import PassRateEstimator


def test_prior_then_ema_updates():
    est = PassRateEstimator(alpha=1.0, beta=16.0, lam=0.9)
    assert est.estimate("x") == pytest.approx(1 / 17)  # Beta(1,16) prior mean
    est.update("x", 8, 2)  # N = 8, N_pos = 2
    assert est.estimate("x") == pytest.approx(3 / 25)
    est.update("x", 4, 4)  # N = 0.9*8 + 4 = 11.2, N_pos = 0.9*2 + 4 = 5.8
    assert est.estimate("x") == pytest.approx(6.8 / 28.2)


def test_never_zero_with_prior():
    est = PassRateEstimator()
    for _ in range(50):
        est.update("hard", 32, 0)
    assert 0 < est.estimate("hard") < 0.01


def test_state_roundtrip_and_bad_counts():
    est = PassRateEstimator()
    est.update("a", 4, 1)
    other = PassRateEstimator()
    other.load_state_dict(est.state_dict())
    assert other.estimate("a") == est.estimate("a")
    with pytest.raises(ValueError):
        est.update("a", 4, 5)
