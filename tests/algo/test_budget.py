"""ada_budget's rules (algo/budget.py) with worked examples, and the strategy and scheduler that use them."""

from math import comb

import pytest

from ada_ray.algo import budget
from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.strategies import PromptState, make_strategy
from ada_ray.algo.types import Prompt, Sample
from ada_ray.config import AlgoConfig
from tests.algo.test_scheduler import bernoulli_rewards, drain, make, samples_for


def test_beta_binomial_uniform_prior_is_flat():
    # Beta(1, 1): every count 0..m equally likely
    assert budget.beta_binomial_pmf(4, 1.0, 1.0) == pytest.approx([0.2] * 5)
    assert sum(budget.beta_binomial_pmf(31, 2.5, 7.0)) == pytest.approx(1.0)


def test_beta_binomial_tends_to_binomial():
    pmf = budget.beta_binomial_pmf(8, 5e4, 5e4)  # posterior concentrated at p = 0.5
    assert pmf[4] == pytest.approx(comb(8, 4) / 256, rel=1e-3)


def test_settle_probability_worked_example():
    # p = 0.5 (concentrated), balance 2/2, n = 4: P(2 <= X <= 6 of 8) = (28+56+70+56+28)/256 = 0.9297
    assert budget.settle_probability(8, 5e4, 5e4, 2, 2, 4) == pytest.approx(238 / 256, rel=1e-3)
    # 4 samples: only X = 2 -> 6/16
    assert budget.settle_probability(4, 5e4, 5e4, 2, 2, 4) == pytest.approx(6 / 16, rel=1e-3)
    # fewer samples than the rule needs: impossible
    assert budget.settle_probability(3, 1.0, 1.0, 2, 2, 4) == 0.0


def test_posterior_and_needs():
    # memory (N=10, N_pos=3), pool 1 pos + 2 neg, uniform prior -> Beta(3+1+1, 7+2+1)
    assert budget.posterior((10.0, 3.0), 1, 2, (1.0, 1.0)) == (5.0, 10.0)
    # balance 2/2, n=4, pool 1 pos + 2 neg: one more positive, no negative, one more sample
    assert budget.needs(2, 2, 4, 1, 2) == (1, 0, 1)
    assert budget.needs(2, 2, 4, 3, 3) == (0, 0, 0)


def test_round_size_smallest_that_reaches_target():
    # p = 0.5 concentrated: 4 -> 0.375, 5 -> 20/32 = 0.625 >= 0.5
    assert budget.round_size(5e4, 5e4, (2, 2, 4), 4, 16, 0.5) == 5
    assert budget.round_size(5e4, 5e4, (2, 2, 4), 4, 16, 0.9) == 8  # 0.93 at 8, 0.86 at 7
    # p ~ 0.02: nothing up to 16 reaches 0.5 -> the cap
    assert budget.round_size(2.0, 98.0, (2, 2, 4), 4, 16, 0.5) == 16


def test_hopeless_parks_never_and_always_solved():
    # 40 wrong of 40, uniform prior: P(2 positives within 16) = 0.075 < 0.1
    a, b = budget.posterior((40.0, 0.0), 0, 0, (1.0, 1.0))
    assert budget.settle_probability(16, a, b, 2, 2, 4) == pytest.approx(0.0752, abs=1e-3)
    assert budget.hopeless(a, b, (2, 2, 4), 16, 0.1)
    # 40 right of 40 is symmetric (no negatives within reach): retired the same way
    assert budget.hopeless(*budget.posterior((40.0, 40.0), 0, 0, (1.0, 1.0)), (2, 2, 4), 16, 0.1)
    # 8 wrong of 8 is not enough evidence: P = 0.40
    assert not budget.hopeless(*budget.posterior((8.0, 0.0), 0, 0, (1.0, 1.0)), (2, 2, 4), 16, 0.1)
    assert budget.hopeless(1.0, 1.0, (2, 2, 4), 0, 0.1)  # no samples left


def test_explores_is_deterministic_and_near_its_floor():
    draws = [budget.explores(0, f"p{i}", 3, 0.1) for i in range(4000)]
    assert draws == [budget.explores(0, f"p{i}", 3, 0.1) for i in range(4000)]
    assert 0.08 < sum(draws) / len(draws) < 0.12
    assert all(budget.explores(0, f"p{i}", 3, 1.0) for i in range(50))


def _algo(**kw):
    base = dict(name="ada_budget", n=4, samples_per_round=8, max_rounds=2, budget_max_samples=16,
                settle_target=0.5, park_below=0.1, explore_floor=0.1, probe_samples=0)
    base.update(kw)
    return AlgoConfig(**base)


def _prompt(pid="p0"):
    return Prompt(pid, "q", (1, 2), "a", "2x1")


def test_first_round_from_history():
    strat = make_strategy(_algo())
    est = PassRateEstimator()
    est.stats = {"mid": (200.0, 100.0), "hard": (40.0, 2.0)}
    sizes = strat.first_round_sizes([_prompt("new"), _prompt("mid"), _prompt("hard")], est)
    # no history: M = 8; p ~ 0.5 with a lot of evidence: 5; p ~ 0.07: P(>= 2 pos in 16) < 0.5 -> the cap
    assert sizes == [8, 5, 16]


def _state(rewards):
    st = PromptState(_prompt(), 0, 0.7)
    st.add_round([Sample("p0", [1], [-0.1], float(r), version=0) for r in rewards])
    return st


def test_top_up_sized_from_pool_and_stopped_when_hopeless():
    strat = make_strategy(_algo())
    est = PassRateEstimator()
    # 1 positive, 4 negatives: one more positive needed; uniform prior + pool -> Beta(2, 5)
    k = strat.next_round_size(_state([1, 0, 0, 0, 0]), est)
    assert k == budget.round_size(2.0, 5.0, (1, 0, 0), 1, 11, 0.5)
    assert 1 <= k <= 11
    # rule already fired: no top-up
    assert strat.next_round_size(_state([1, 1, 0, 0, 0]), est) is None
    # 16 wrong of 16 with a history of 40 wrong: nothing left in the cap
    est.stats = {"p0": (40.0, 0.0)}
    assert strat.next_round_size(_state([0] * 16), est) is None
    # 8 wrong of 8 with that history: P(2 positives within 8 more) is tiny -> stop
    assert strat.next_round_size(_state([0] * 8), est) is None


def test_round_cap_ends_the_prompt():
    strat = make_strategy(_algo(max_rounds=1))
    assert strat.next_round_size(_state([1, 0, 0, 0, 0]), PassRateEstimator()) is None


def test_admits_parks_hopeless_seen_prompts_only():
    strat = make_strategy(_algo(explore_floor=1e-9))
    est = PassRateEstimator()
    est.stats = {"never": (40.0, 0.0), "always": (40.0, 40.0), "mid": (40.0, 20.0)}
    assert strat.admits("fresh", est, 0, 0)
    assert strat.admits("mid", est, 0, 0)
    assert not strat.admits("never", est, 0, 0)
    assert not strat.admits("always", est, 0, 0)
    assert make_strategy(_algo(explore_floor=1.0)).admits("never", est, 0, 0)
    # the paper's methods never pass a prompt over
    assert make_strategy(AlgoConfig(name="ada_seq_balance")).admits("never", est, 0, 0)


def test_scheduler_skips_parked_prompts_and_keeps_accounting():
    est = PassRateEstimator()
    est.stats = {pid: (60.0, 0.0) for pid in ("p0", "p1", "p2", "p3")}  # all-wrong histories: parked
    s = make("ada_budget", n_prompts=6, B=2, n=4, samples_per_round=8, max_rounds=2, budget_max_samples=16,
             park_below=0.1, explore_floor=1e-9, probe_samples=0, estimator=est, total_steps=3)
    for c in range(3):
        drain(s, bernoulli_rewards(lambda pid: 0.5))
        res = s.take_cohort(c)
        assert {g.prompt_id for g in res.groups} <= {"p4", "p5"}
        s.set_version(c + 1)
    assert res.skipped > 0
    acc = s.check_accounting()
    assert acc["prompts_drawn"] == acc["prompts_trained"] == 6


def test_scheduler_draw_ends_when_everything_is_parked():
    # every prompt parked and no exploration: after a dataset's worth of skips the next one is taken
    est = PassRateEstimator()
    est.stats = {pid: (60.0, 0.0) for pid in ("p0", "p1", "p2")}
    s = make("ada_budget", n_prompts=3, B=1, n=4, samples_per_round=8, max_rounds=2, budget_max_samples=16,
             explore_floor=1e-9, probe_samples=0, estimator=est, total_steps=2)
    drain(s, bernoulli_rewards(lambda pid: 0.0))
    res = s.take_cohort(0)
    assert len(res.groups) == 1 and res.groups[0].pool_size <= 16
    s.set_version(1)
    assert s.lease("s0", 10, 0.0)  # the next cohort opened too


def test_scheduler_probes_never_solved_prompts_with_one_small_round():
    # the same all-wrong histories with probes on: none passed over; each gets one round of 4, no top-up
    # (the fresh p4, p5 get the paper's first round of M = 8)
    est = PassRateEstimator()
    est.stats = {pid: (60.0, 0.0) for pid in ("p0", "p1", "p2", "p3")}
    s = make("ada_budget", n_prompts=6, B=2, n=4, samples_per_round=8, max_rounds=2, budget_max_samples=8,
             park_below=0.1, explore_floor=1e-9, probe_samples=4, estimator=est, total_steps=3)
    pools = {}
    for c in range(3):
        drain(s, bernoulli_rewards(lambda pid: 0.0))
        res = s.take_cohort(c)
        assert res.skipped == 0
        pools |= {g.prompt_id: (g.pool_size, g.rounds) for g in res.groups}
        s.set_version(c + 1)
    assert pools == {**{f"p{i}": (4, 1) for i in range(4)}, "p4": (8, 1), "p5": (8, 1)}
    acc = s.check_accounting()
    assert acc["prompts_drawn"] == acc["prompts_trained"] == 6


def test_budget_samples_stay_within_the_cap():
    s = make("ada_budget", n_prompts=20, B=10, n=4, samples_per_round=8, max_rounds=2, budget_max_samples=12,
             total_steps=4)
    for c in range(4):
        drain(s, bernoulli_rewards(lambda pid: 0.1 * (int(pid[1:]) % 10)))
        res = s.take_cohort(c)
        assert len(res.groups) == 10
        assert all(len(g.samples) == 4 and g.pool_size <= 12 and g.rounds <= 2 for g in res.groups)
        s.set_version(c + 1)
    s.check_accounting()


def test_samples_for_is_shared():  # the helper used above reports exactly what was asked
    s = make("ada_budget", n_prompts=2, B=1, n=4, samples_per_round=8, max_rounds=2)
    item = s.lease("s0", 1, 0.0)[0]
    assert len(samples_for(item, [0] * item.num_samples)) == 8


def test_pair_need_keeps_one_of_each_still_needed():
    assert budget.pair_need((2, 2, 4)) == (1, 1, 0)
    assert budget.pair_need((0, 3, 1)) == (0, 1, 0)
    assert budget.mostly_wrong(1.0, 41.0) and not budget.mostly_wrong(41.0, 1.0)


def test_park_need_pair_parks_later_than_the_exit_rule():
    # 12 wrong of 12, uniform prior -> Beta(1, 13), cap 8: P(>= 2 pos, >= 2 neg in 8) = 0.133 < 0.25 (parked),
    # P(>= 1 pos in 8) = 1 - 13/21 = 0.381 >= 0.25 (a pair is within reach: drawn)
    est = PassRateEstimator()
    est.stats = {"hard": (12.0, 0.0), "never": (60.0, 0.0)}
    kw = dict(budget_max_samples=8, park_below=0.25, explore_floor=1e-9)
    assert budget.settle_probability(8, 1.0, 13.0, 2, 2, 4) == pytest.approx(0.1333, abs=1e-3)
    assert budget.settle_probability(8, 1.0, 13.0, 1, 1, 0) == pytest.approx(1 - 13 / 21, abs=1e-3)
    assert not make_strategy(_algo(**kw)).admits("hard", est, 0, 0)
    assert make_strategy(_algo(park_need="pair", **kw)).admits("hard", est, 0, 0)
    # 60 wrong of 60: P(>= 1 pos in 8) = 1 - 61/69 = 0.116: parked under either rule
    assert not make_strategy(_algo(park_need="pair", **kw)).admits("never", est, 0, 0)


def test_probe_round_for_mostly_failed_prompts_out_of_reach():
    est = PassRateEstimator()
    est.stats = {"never": (40.0, 0.0), "always": (40.0, 40.0), "mid": (200.0, 100.0)}
    strat = make_strategy(_algo(probe_samples=4, explore_floor=1e-9))
    # the never-solved prompt is drawn with a round of 4 instead of parked; the always-solved one is retired
    assert strat.admits("never", est, 0, 0)
    assert not strat.admits("always", est, 0, 0)
    assert strat.first_round_sizes([_prompt("never"), _prompt("mid")], est) == [4, 5]
    # four more wrong: no top-up; a success in the probe earns one only if a pair is then within reach
    st = _state([0, 0, 0, 0])
    est.stats = {"p0": (40.0, 0.0)}
    assert strat.next_round_size(st, est) is None
    est.stats = {"p0": (4.0, 0.0)}
    assert strat.next_round_size(_state([1, 0, 0, 0]), est) is not None
    # probes off (the default): parked as before
    est.stats = {"never": (40.0, 0.0)}
    assert not make_strategy(_algo(explore_floor=1e-9)).admits("never", est, 0, 0)


@pytest.mark.parametrize("kw,key", [(dict(probe_samples=2), "algo.probe_samples"),
                                    (dict(probe_samples=20), "algo.probe_samples"),
                                    (dict(park_need="rule"), "algo.park_need")])
def test_budget_coverage_settings_are_checked(kw, key):
    from ada_ray.config import ConfigError, load_config
    with pytest.raises(ConfigError, match=key):
        load_config("default", [f"algo.{k}={v}" for k, v in kw.items()])
