"""Strategies: built from the name -> class map, and DAPO's replacement as a strategy method."""

import pytest

from ada_ray.algo.strategies import AdaBudget, DAPO, GRPO, STRATEGIES, AdaEst, AdaSeq, PromptState, make_strategy
from ada_ray.algo.types import Prompt, Sample
from ada_ray.config import AlgoConfig
from tests.algo.test_scheduler import make, samples_for


def finished_group(strategy, rewards):
    st = PromptState(Prompt("p0", "q", (1, 2), "a"), 0, strategy.threshold)
    st.add_round([Sample("p0", [3], [-0.1], float(r), 0) for r in rewards])
    return strategy.finalize(st)


def test_every_name_builds_its_class():
    expected = {"grpo": GRPO, "dapo": DAPO, "ada_seq_pos": AdaSeq, "ada_seq_balance": AdaSeq, "ada_est": AdaEst,
                "ada_budget": AdaBudget}
    assert STRATEGIES == expected
    for name, cls in expected.items():
        s = make_strategy(AlgoConfig(name=name))
        assert type(s) is cls and s.name == name


def test_an_unknown_name_is_refused_with_the_names():
    with pytest.raises(ValueError, match="unknown algo.name 'ppo': expected one of grpo, dapo, ada_seq_pos, "
                                         "ada_seq_balance, ada_est"):
        make_strategy(AlgoConfig(name="ppo"))


def test_only_dapo_replaces_and_only_zero_signal_groups():
    dapo = make_strategy(AlgoConfig(name="dapo"))
    assert dapo.should_replace(finished_group(dapo, [0, 0, 0, 0]))
    assert dapo.should_replace(finished_group(dapo, [1, 1, 1, 1]))
    assert not dapo.should_replace(finished_group(dapo, [1, 0, 0, 0]))
    grpo = make_strategy(AlgoConfig(name="grpo"))
    assert not grpo.should_replace(finished_group(grpo, [0, 0, 0, 0]))  # kept with zero advantage


def test_the_scheduler_replaces_what_the_strategy_method_says():
    class ReplaceFirstWrong(GRPO):  # any strategy can replace groups; the scheduler asks the method
        def should_replace(self, group):
            return group.samples[0].reward == 0

    s = make("grpo", n_prompts=6, B=2, dapo_max_draws_factor=2.0)
    s.strategy = ReplaceFirstWrong(s.algo)
    first = s.lease("s0", 2, 0.0)
    s.report("s0", first[0].item_id, samples_for(first[0], [0, 1, 1, 1]))  # replaced (a mixed group)
    s.report("s0", first[1].item_id, samples_for(first[1], [1, 0, 0, 0]))  # kept
    (repl,) = s.lease("s0", 10, 0.0)
    assert repl.prompt_id not in {it.prompt_id for it in first}
    s.report("s0", repl.item_id, samples_for(repl, [1, 1, 0, 0]))
    res = s.take_cohort(0)
    assert [g.prompt_id for g in res.groups] == [first[1].prompt_id, repl.prompt_id]
    assert [g.prompt_id for g in res.dropped] == [first[0].prompt_id] and res.dropped[0].dropped
    assert res.draws == 3 and not res.dapo_cap_hit
    assert s.check_accounting()["prompts_dropped"] == 1
