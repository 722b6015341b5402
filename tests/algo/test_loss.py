import math

import pytest
import torch

from ada_ray.algo.loss import LossConfig, policy_loss, token_logprobs_and_entropy


def _lp(values):
    return torch.tensor(values, dtype=torch.float64).log()


def test_ppo_clip_token_mean_hand_computed():
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip_c=None, tis_cap=None)
    # two sequences, three tokens; the second sequence has one padded token
    logp = _lp([[0.5, 0.5, 0.5], [0.5, 0.5, 0.9]])
    prox = _lp([[0.25, 0.5, 0.5], [0.5, 0.8, 0.9]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, m = policy_loss(logp, prox, None, adv, mask, cfg)
    # seq 0, A=+1: ratios 2, 1, 1 -> clipped to 1.28 for the first: -1.28, -1, -1
    # seq 1, A=-1: ratios 1, 0.625 -> pg = max(r, clip(r, .8, 1.28)) = 1, 0.8
    expected = (-1.28 - 1 - 1 + 1 + 0.8) / 5
    assert float(loss) == pytest.approx(expected)
    assert m["clip_frac"] == pytest.approx(2 / 5)
    assert m["tokens"] == 5


def test_dual_clip_bounds_negative_advantage_loss():
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip_c=3.0, tis_cap=None)
    logp = _lp([[0.9]])
    prox = _lp([[0.1]])  # ratio 9
    mask = torch.ones(1, 1)
    loss, m = policy_loss(logp, prox, None, torch.tensor([-1.0], dtype=torch.float64), mask, cfg)
    assert float(loss) == pytest.approx(3.0)  # min(9, c=3) * |A|
    assert m["dual_clip_frac"] == 1.0
    loss_nodual, _ = policy_loss(logp, prox, None, torch.tensor([-1.0], dtype=torch.float64), mask,
                                 LossConfig(dual_clip_c=None, tis_cap=None))
    assert float(loss_nodual) == pytest.approx(9.0)


def test_truncated_importance_weight_against_behaviour():
    cfg = LossConfig(dual_clip_c=None, tis_cap=2.0)
    logp = _lp([[0.5, 0.5]])
    prox = _lp([[0.5, 0.5]])
    behav = _lp([[0.1, 0.4]])  # prox/mu = 5 (truncated to 2), 1.25
    loss, m = policy_loss(logp, prox, behav, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), cfg)
    assert float(loss) == pytest.approx((-2.0 - 1.25) / 2)
    assert m["is_truncated_frac"] == pytest.approx(0.5)


def test_gradient_of_on_policy_loss_is_policy_gradient():
    logits = torch.zeros(1, 2, 3, requires_grad=True)
    targets = torch.tensor([[0, 1]])
    lp, ent = token_logprobs_and_entropy(logits, targets)
    loss, _ = policy_loss(lp, lp.detach(), lp.detach(), torch.tensor([2.0]), torch.ones(1, 2), LossConfig())
    loss.backward()
    # d/dlogits of -A * mean_t log softmax = -A/T * (onehot - softmax)
    expected = -(2.0 / 2) * (torch.eye(3)[[0, 1]] - 1 / 3)
    assert torch.allclose(logits.grad[0], expected, atol=1e-6)
    assert ent is not None and torch.allclose(ent, torch.full((1, 2), math.log(3)))


def test_entropy_bonus_and_kl_term():
    cfg = LossConfig(dual_clip_c=None, tis_cap=None, entropy_coef=0.1, kl_coef=0.5)
    logp = _lp([[0.5]])
    ref = _lp([[0.25]])
    loss, m = policy_loss(logp, logp, None, torch.tensor([0.0], dtype=torch.float64), torch.ones(1, 1), cfg,
                          entropy=torch.tensor([[2.0]], dtype=torch.float64), ref_logprobs=ref)
    d = math.log(0.5)  # log(ref/pi) = log(0.25/0.5)
    k3 = math.exp(d) - d - 1
    assert float(loss) == pytest.approx(-0.1 * 2.0 + 0.5 * k3)
    assert m["kl_ref"] == pytest.approx(k3)


def test_seq_mean_token_mean_and_shared_denominator():
    cfg = LossConfig(dual_clip_c=None, tis_cap=None, loss_agg="seq_mean_token_mean")
    lp = torch.zeros(2, 2, dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, _ = policy_loss(lp, lp, None, torch.tensor([1.0, 3.0], dtype=torch.float64), mask, cfg)
    assert float(loss) == pytest.approx((-1.0 + -3.0) / 2)
    cfg.loss_agg = "token_mean"
    loss, _ = policy_loss(lp, lp, None, torch.tensor([1.0, 3.0], dtype=torch.float64), mask, cfg, num_tokens=6)
    assert float(loss) == pytest.approx((-1 - 1 - 3) / 6)  # data-parallel: global token count


def test_temperature_scales_logits():
    logits = torch.tensor([[[2.0, 0.0]]])
    lp, _ = token_logprobs_and_entropy(logits, torch.tensor([[0]]), temperature=2.0)
    assert float(lp) == pytest.approx(math.log(math.e / (math.e + 1)))


def test_kl_behaviour_metric_is_the_k3_estimate():
    """kl_behaviour: mean over tokens of exp(d) - d - 1, d = behaviour - current log-prob (0 when equal)."""
    cfg = LossConfig(dual_clip_c=None, tis_cap=None)
    logp = _lp([[0.5, 0.25]])
    mask = torch.tensor([[1, 1]])
    adv = torch.tensor([1.0], dtype=torch.float64)
    _, same = policy_loss(logp, logp, logp, adv, mask, cfg)
    assert same["kl_behaviour"] == pytest.approx(0.0)
    behaviour = _lp([[0.25, 0.25]])
    _, m = policy_loss(logp, logp, behaviour, adv, mask, cfg)
    d = math.log(0.25) - math.log(0.5)
    assert m["kl_behaviour"] == pytest.approx((math.exp(d) - d - 1.0) / 2)
    _, none = policy_loss(logp, logp, None, adv, mask, cfg)
    assert "kl_behaviour" not in none
