from ada_ray.algo.exit_rules import ExitRule, exit_rule_for
from ada_ray.config import AlgoConfig


def test_balance_needs_both_sides_at_defaults():
    rule = exit_rule_for(AlgoConfig(name="ada_seq_balance", n=4))
    assert (rule.kind, rule.k_pos, rule.k_neg, rule.max_rounds) == ("balance", 2, 2, 4)
    assert not rule.satisfied(1, 7)
    assert not rule.satisfied(7, 1)
    assert rule.satisfied(2, 6)
    assert rule.satisfied(2, 2)


def test_balance_odd_n_splits_floor_and_ceiling():
    rule = exit_rule_for(AlgoConfig(name="ada_seq_balance", n=5))
    assert (rule.k_pos, rule.k_neg) == (2, 3)
    assert not rule.satisfied(2, 2)
    assert rule.satisfied(2, 3)


def test_pos_rule_fires_on_first_positive_even_without_negatives():
    rule = exit_rule_for(AlgoConfig(name="ada_seq_pos", n=4))
    assert (rule.kind, rule.k_pos) == ("pos", 1)
    assert not rule.satisfied(0, 8)
    assert rule.satisfied(1, 7)
    assert rule.satisfied(8, 0)  # 8/8 correct in round 0: stops (zero-advantage group)


def test_configurable_k_pos_k_neg():
    rule = exit_rule_for(AlgoConfig(name="ada_seq_balance", n=4, k_pos=3, k_neg=1))
    assert not rule.satisfied(2, 6)
    assert rule.satisfied(3, 1)


def test_rule_needs_pool_of_n():
    rule = ExitRule("pos", n=4, k_pos=1, max_rounds=4)
    assert not rule.satisfied(1, 1)  # only 2 samples: cannot keep a group of 4 yet
    assert rule.satisfied(1, 3)


def test_round_cap_ends_sampling():
    rule = exit_rule_for(AlgoConfig(name="ada_seq_balance", n=4, max_rounds=4))
    assert not rule.done(0, 24, rounds_done=3)
    assert rule.done(0, 32, rounds_done=4)
    assert rule.done(2, 6, rounds_done=1)


def test_fixed_rule_for_single_round_algorithms():
    for name in ("grpo", "dapo", "ada_est"):
        rule = exit_rule_for(AlgoConfig(name=name, n=4))
        assert rule.kind == "fixed" and rule.done(0, 4, rounds_done=1)


def test_seq_pos_with_fewer_samples_per_round_than_n_waits_for_a_pool_of_n():
    # Deliberate difference (docs/CONFIG.md, exit_rules docstring): M = 2 < n = 4, a positive in
    # round 1. The official code stops here and keeps 2 rows; this project samples round 2 first.
    rule = exit_rule_for(AlgoConfig(name="ada_seq_pos", n=4, samples_per_round=2, max_rounds=4))
    assert not rule.done(1, 1, rounds_done=1)
    assert rule.done(1, 3, rounds_done=2)
