"""Worked examples of the algorithm defaults for knobs left null (ada_ray.knob_defaults)."""

from types import SimpleNamespace

from ada_ray.knob_defaults import effective_k_neg, effective_k_pos, effective_norm_adv_by_std
from ada_ray.config import AlgoConfig


def algo(name, n=4, k_pos=None, k_neg=None, norm=None):
    return SimpleNamespace(name=name, n=n, k_pos=k_pos, k_neg=k_neg, norm_adv_by_std=norm)


def test_seq_balance_splits_n_floor_and_ceiling():
    assert (effective_k_pos(algo("ada_seq_balance", 4)), effective_k_neg(algo("ada_seq_balance", 4))) == (2, 2)
    assert (effective_k_pos(algo("ada_seq_balance", 5)), effective_k_neg(algo("ada_seq_balance", 5))) == (2, 3)
    assert (effective_k_pos(algo("ada_seq_balance", 1)), effective_k_neg(algo("ada_seq_balance", 1))) == (0, 1)


def test_seq_pos_wants_one_positive_and_no_negatives():
    assert (effective_k_pos(algo("ada_seq_pos", 8)), effective_k_neg(algo("ada_seq_pos", 8))) == (1, 0)


def test_set_values_win_over_defaults():
    a = algo("ada_seq_pos", 8, k_pos=3, k_neg=2)
    assert (effective_k_pos(a), effective_k_neg(a)) == (3, 2)
    assert effective_k_pos(algo("ada_seq_balance", 4, k_pos=0)) == 0  # 0 is a value, not "unset"
    assert effective_norm_adv_by_std(algo("grpo", norm=False)) is False
    assert effective_norm_adv_by_std(algo("ada_seq_balance", norm=True)) is True


def test_std_normalisation_default_on_for_grpo_dapo_only():
    assert [effective_norm_adv_by_std(algo(n)) for n in ("grpo", "dapo", "ada_seq_pos", "ada_seq_balance", "ada_est")] \
        == [True, True, False, False, False]


def test_config_dataclass_satisfies_the_protocol():
    a = AlgoConfig(name="ada_seq_balance", n=6)
    assert (effective_k_pos(a), effective_k_neg(a), effective_norm_adv_by_std(a)) == (3, 3, False)
