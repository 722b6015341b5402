"""Prompt sources: the scheduler reads token ids from its source only for the prompts it admits."""

import pytest

from ada_ray.algo.prompt_source import InMemoryPrompts, as_source
from ada_ray.algo.scheduler import WorkScheduler
from ada_ray.algo.types import Prompt
from ada_ray.config import AlgoConfig


def prompts(n):
    return [Prompt(f"p{i}", f"q{i}", (1, i + 2), str(i), "x", 0.5 if i % 3 == 0 else None) for i in range(n)]


class CountingSource(InMemoryPrompts):
    """An InMemoryPrompts that records which prompts were fetched whole."""

    def __init__(self, ps):
        super().__init__(ps)
        self.fetched = []

    def get(self, prompt_id):
        self.fetched.append(prompt_id)
        return super().get(prompt_id)

    def get_many(self, prompt_ids):
        self.fetched.extend(prompt_ids)
        return super().get_many(prompt_ids)


def test_lists_become_sources_and_junk_is_refused():
    src = as_source(prompts(3))
    assert isinstance(src, InMemoryPrompts) and len(src) == 3 and src.ids() == ["p0", "p1", "p2"]
    assert "p1" in src and "p9" not in src and src.get("p2").token_ids == (1, 4)
    assert src.get_many(["p2", "p0"]) == [src.get("p2"), src.get("p0")]
    assert list(src.priors()) == [("p0", 0.5)]
    with pytest.raises(ValueError, match="duplicate prompt ids"):
        as_source(prompts(2) + prompts(1))
    with pytest.raises(TypeError, match="a list of Prompts or a PromptSource, got dict"):
        as_source({"p0": prompts(1)[0]})


def test_scheduler_fetches_only_admitted_prompts_and_seeds_priors():
    src = CountingSource(prompts(1000))
    s = WorkScheduler(src, AlgoConfig(name="grpo", prior_weight=4), batch_prompts=8, max_staleness=1)
    assert len(src.fetched) == 16  # two cohorts open (version 0, staleness 1): 16 of 1000 prompts read
    assert set(src.fetched) == {it.prompt_id for it in s.lease("s0", 100, 0.0)}
    assert s.estimator.seen("p0") and s.estimator.seen("p999") and not s.estimator.seen("p1")


def test_a_checkpoint_before_any_lease_resumes_the_same_work_and_groups_carry_their_rows():
    import json

    from ada_ray.algo.types import Sample

    ps = [Prompt(f"p{i}", f"q{i}", (1, i + 2), str(i), "hard" if i % 2 else "easy") for i in range(20)]
    s = WorkScheduler(CountingSource(ps), AlgoConfig(name="grpo", n=2), batch_prompts=4, max_staleness=0, seed=3)
    state = json.loads(json.dumps(s.state_dict()))  # saved before any of cohort 0's work was leased
    t = WorkScheduler(CountingSource(ps), AlgoConfig(name="grpo", n=2), batch_prompts=4, max_staleness=0, seed=3)
    t.load_state_dict(state)
    key = lambda it: (it.prompt_id, it.token_ids, it.answer, it.cohort, it.round, it.num_samples, it.seed)  # noqa: E731
    items = s.lease("s0", 100, 0.0)
    assert sorted(map(key, items)) == sorted(map(key, t.lease("s0", 100, 0.0)))  # the same work, rows and all
    for it in items:
        s.report("s0", it.item_id, [Sample(it.prompt_id, [5], [-0.5], r, 0) for r in (1.0, 0.0)])
    res = s.take_cohort(0)
    by_id = {p.prompt_id: p for p in ps}
    assert all(g.prompt_ids == list(by_id[g.prompt_id].token_ids) and g.difficulty == by_id[g.prompt_id].difficulty
               for g in res.groups) and len(res.groups) == 4


def test_a_source_and_the_same_list_schedule_the_same_work():
    a = WorkScheduler(prompts(50), AlgoConfig(name="ada_seq_balance"), batch_prompts=4, max_staleness=2, seed=3)
    b = WorkScheduler(CountingSource(prompts(50)), AlgoConfig(name="ada_seq_balance"), batch_prompts=4,
                      max_staleness=2, seed=3)
    assert a.lease("s", 100, 0.0) == b.lease("s", 100, 0.0)
