"""algo/queue_shards.py: the pure half of a sharded PromptQueue (trainer.queue_shards)."""

import pickle
import random

import pytest

from ada_ray.algo import queue_shards as qs
from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.prompt_source import InMemoryPrompts
from ada_ray.algo.scheduler import CohortResult, WorkScheduler
from ada_ray.algo.types import Group, Prompt, Sample, Signal
from ada_ray.config import AlgoConfig


def prompts(n):
    return [Prompt(f"p{i}", f"q{i}", (1, i + 2), str(i), "x", 0.25 if i % 3 == 0 else None) for i in range(n)]


class CountingSource(InMemoryPrompts):
    def __init__(self, ps):
        super().__init__(ps)
        self.fetched = []

    def get_many(self, prompt_ids):
        self.fetched.extend(prompt_ids)
        return super().get_many(prompt_ids)


def test_shard_of_is_stable_in_range_and_spreads():
    assert qs.shard_of("p0", 1) == 0
    got = [qs.shard_of(f"p{i}", 4) for i in range(4000)]
    assert set(got) == {0, 1, 2, 3} and all(800 < got.count(k) < 1200 for k in range(4))
    # blake2b of the id: pinned, so a checkpoint's prompts land in the same shard in every process
    assert [qs.shard_of(f"p{i}", 3) for i in range(8)] == [qs.shard_of(f"p{i}", 3) for i in range(8)]
    assert qs.shard_of("p0", 7) == int.from_bytes(__import__("hashlib").blake2b(b"p0", digest_size=8).digest(),
                                                 "little") % 7


def test_batch_shares_are_even_and_sum_to_the_batch():
    assert qs.batch_shares(10, 3) == [4, 3, 3]
    assert qs.batch_shares(8, 4) == [2, 2, 2, 2]
    assert qs.batch_shares(5, 1) == [5]
    assert qs.batch_shares(3, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="cannot be split over 4 shards"):
        qs.batch_shares(3, 4)


def test_shard_sources_partition_the_prompts_in_dataset_order():
    src = InMemoryPrompts(prompts(100))
    views = [qs.ShardSource(src, k, 3) for k in range(3)]
    all_ids = src.ids()
    assert sorted(pid for v in views for pid in v.ids()) == sorted(all_ids)
    for k, v in enumerate(views):
        assert v.ids() == [pid for pid in all_ids if qs.shard_of(pid, 3) == k]  # dataset order
        assert len(v) == len(v.ids())
        pid = v.ids()[0]
        assert pid in v and v.get(pid) == src.get(pid) and v.get_many(v.ids()[:2]) == src.get_many(v.ids()[:2])
        other = next(p for p in all_ids if p not in v)
        assert other not in v and "nope" not in v
        with pytest.raises(KeyError):
            v.get(other)
        assert list(v.priors()) == [(p, r) for p, r in src.priors() if qs.shard_of(p, 3) == k]
    with pytest.raises(ValueError):
        qs.ShardSource(src, 3, 3)


def test_a_shard_of_a_prompt_table_pickles_as_the_tables_path(tmp_path):
    from ada_ray.data.prompt_table import synthetic_table

    table = synthetic_table(tmp_path / "t.arrow", 300, 16, lambda pid: 0.5)
    view = qs.ShardSource(table, 1, 2)
    view.ids()  # built here; not what travels
    blob = pickle.dumps(view)
    assert len(blob) < 400
    back = pickle.loads(blob)
    assert back.ids() == view.ids() and back.get(view.ids()[3]) == table.get(view.ids()[3])
    assert qs.shard_prompts(table, 1, 2).ids() == view.ids()


def test_a_list_is_split_into_lists():
    ps = prompts(50)
    parts = [qs.shard_prompts(ps, k, 2) for k in range(2)]
    assert all(isinstance(p, list) for p in parts)
    assert sorted(p.prompt_id for part in parts for p in part) == sorted(p.prompt_id for p in ps)
    with pytest.raises(ValueError, match="duplicate"):
        qs.shard_prompts(ps + ps[:1], 0, 2)


def test_shard_estimator_state_keeps_its_prompts_and_merge_reunites_them():
    est = PassRateEstimator(1.0, 1.0, 0.9)
    for i in range(30):
        est.update(f"p{i}", 4, i % 4)
    state = est.state_dict()
    parts = [qs.shard_estimator_state(state, k, 3) for k in range(3)]
    for k, part in enumerate(parts):
        assert all(qs.shard_of(pid, 3) == k for pid in part["stats"])
    assert qs.merge_estimator_states(parts) == state
    assert qs.shard_estimator_state(None, 0, 2) is None
    with pytest.raises(ValueError, match="different parameters"):
        qs.merge_estimator_states([parts[0], {**parts[1], "lam": 0.5}])


def group(pid, cohort=0):
    return Group(pid, [1], [Sample(pid, [1], [-0.1], 1.0, 0)], [0.5], cohort, 1, 1, 1, True)


def test_merge_cohorts_concatenates_in_shard_order():
    a = CohortResult(4, [group("a"), group("b")], [group("x")], 3, False, 10)
    b = CohortResult(4, [group("c")], [], 1, True, 7)
    m = qs.merge_cohorts(4, [a, b])
    assert [g.prompt_id for g in m.groups] == ["a", "b", "c"] and [g.prompt_id for g in m.dropped] == ["x"]
    assert (m.index, m.draws, m.dapo_cap_hit, m.samples_generated) == (4, 4, True, 17)
    with pytest.raises(ValueError, match="cohort 5 for cohort 4"):
        qs.merge_cohorts(4, [a, CohortResult(5, [], [], 0, False, 0)])


def test_merge_wait_accounting_stats_resources():
    assert qs.merge_wait([Signal.READY, Signal.READY]) == Signal.READY
    assert qs.merge_wait([Signal.READY, Signal.TIMEOUT]) == Signal.TIMEOUT
    assert qs.merge_wait([Signal.TIMEOUT, Signal.END]) == Signal.END
    acc = qs.merge_accounting([{"issued": 3, "items_ok": True, "prompts_ok": True},
                               {"issued": 4, "items_ok": True, "prompts_ok": False}])
    assert acc == {"issued": 7, "items_ok": True, "prompts_ok": False}
    st = qs.merge_stats([{"busy_s": 1.0, "calls": 2, "open_cohorts": 3, "version": 5, "leased_by": {"s0": 2}},
                         {"busy_s": 0.5, "calls": 1, "open_cohorts": 2, "version": 4, "leased_by": {"s0": 1, "s1": 4}}])
    assert st == {"busy_s": 1.5, "calls": 3, "open_cohorts": 3, "version": 4, "leased_by": {"s0": 3, "s1": 4},
                  "shards": 2}
    assert qs.merge_resources([{"pid": 7, "cpu_s": 1.0, "rss_mb": 10.0}, {"pid": 9, "cpu_s": 2.0, "rss_mb": 5.0}]) == \
        {"cpu_s": 3.0, "rss_mb": 15.0}  # a process id is not summed


def test_sharded_states_round_trip_and_a_different_shard_count_is_refused():
    st = qs.sharded_state([{"version": 1}, {"version": 1}])
    assert st == {"shards": [{"version": 1}, {"version": 1}], "queue_shards": 2}
    assert qs.shard_states(st, 2) == [{"version": 1}, {"version": 1}]
    assert qs.shard_states({"version": 3}, 1) == [{"version": 3}]  # one shard: a plain queue.json
    with pytest.raises(qs.ShardStateError, match=r"trainer.queue_shards = 2, this run has trainer.queue_shards = 3"):
        qs.shard_states(st, 3)
    with pytest.raises(qs.ShardStateError, match=r"trainer.queue_shards = 1, this run has trainer.queue_shards = 2"):
        qs.shard_states({"version": 3}, 2)
    with pytest.raises(qs.ShardStateError, match="inconsistent"):
        qs.shard_states({"shards": [{}, {}], "queue_shards": 3}, 2)


def test_sharded_schedulers_give_full_cohorts_within_the_staleness_bound():
    """K schedulers over the shards, samplers on shard i % K, cohorts merged: every cohort has B
    distinct prompts, every sample is within max_staleness of the step, accounting balances."""
    B, K, S = 10, 3, 5
    ps = prompts(200)
    shares = qs.batch_shares(B, K)
    algo = AlgoConfig(name="ada_seq_balance")
    shards = [WorkScheduler(qs.shard_prompts(ps, k, K), algo, batch_prompts=shares[k], max_staleness=1, seed=1)
              for k in range(K)]
    rng = random.Random(0)
    for step in range(12):
        while not all(s.cohort_status(step) == Signal.READY for s in shards):
            i = rng.randrange(S)
            s = shards[i % K]
            for it in s.lease(f"s{i}", rng.randint(1, 4), 0.0):
                s.report(f"s{i}", it.item_id, [Sample(it.prompt_id, [1], [-0.1], float(rng.random() < 0.5),
                                                      it.version) for _ in range(it.num_samples)])
        m = qs.merge_cohorts(step, [s.take_cohort(step) for s in shards])
        ids = [g.prompt_id for g in m.groups]
        assert len(ids) == B and len(set(ids)) == B
        assert all(step - smp.version <= 1 for g in m.groups for smp in g.samples)
        for s in shards:
            s.set_version(step + 1)
    for s in shards:
        s.shutdown()
    acc = qs.merge_accounting([s.check_accounting() for s in shards])
    assert acc["items_ok"] and acc["prompts_ok"] and acc["prompts_trained"] == 12 * B


def test_a_shard_view_reads_only_admitted_prompts():
    src = CountingSource(prompts(1000))
    view = qs.ShardSource(src, 0, 2)
    WorkScheduler(view, AlgoConfig(name="grpo"), batch_prompts=4, max_staleness=1)
    assert len(src.fetched) == 8 and all(qs.shard_of(p, 2) == 0 for p in src.fetched)


def test_a_merged_cohort_splits_back_into_each_shards_part():
    """What the coordinator hands each shard when a cohort comes back (return_cohort)."""
    from ada_ray.algo.queue_shards import merge_cohorts, shard_of, split_cohort
    from ada_ray.algo.scheduler import CohortResult

    groups = [group(f"p{i}", 3) for i in range(8)]
    merged = CohortResult(3, groups[:6], groups[6:], 8, True, 40, 2)
    parts = split_cohort(merged, 2)
    for k, part in enumerate(parts):
        assert all(shard_of(g.prompt_id, 2) == k for g in part.groups + part.dropped)
        assert part.draws == len(part.groups) + len(part.dropped) and part.dapo_cap_hit
    again = merge_cohorts(3, parts)
    assert sorted(g.prompt_id for g in again.groups) == sorted(g.prompt_id for g in merged.groups)
    assert (again.draws, again.samples_generated, again.skipped) == (8, 40, 2)
