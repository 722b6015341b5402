import random

import pytest

from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.scheduler import SchedulerError, WorkScheduler, item_seed
from ada_ray.algo.types import Prompt, Sample
from ada_ray.config import AlgoConfig


def prompts(n):
    return [Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(n)]


def samples_for(item, rewards):
    return [Sample(item.prompt_id, [5, 2], [-0.1, -0.2], float(r), version=item.version) for r in rewards]


def bernoulli_rewards(p_of):
    """Deterministic fake verifier: rewards depend only on the item's seed."""
    def fn(item):
        rng = random.Random(item.seed)
        return [1.0 if rng.random() < p_of(item.prompt_id) else 0.0 for _ in range(item.num_samples)]
    return fn


def drain(s, reward_fn, sampler="s0", max_items=1000):
    """Lease and report until no ready work is left."""
    done = 0
    while True:
        items = s.lease(sampler, max_items, now=0.0)
        if not items:
            return done
        for it in items:
            assert s.report(sampler, it.item_id, samples_for(it, reward_fn(it)))
            done += 1


def make(name="ada_seq_balance", n_prompts=4, B=2, **kw):
    algo_kw = {k: kw.pop(k) for k in list(kw) if k in AlgoConfig.__dataclass_fields__}
    return WorkScheduler(prompts(n_prompts), AlgoConfig(name=name, **algo_kw), batch_prompts=B, **kw)


def test_grpo_cohort_of_fixed_groups():
    s = make("grpo", n_prompts=4, B=2, max_staleness=0)
    items = s.lease("s0", 10, 0.0)
    assert [(i.prompt_id in {"p0", "p1", "p2", "p3"}, i.num_samples, i.cohort) for i in items] == [(True, 4, 0)] * 2
    for it in items:
        s.report("s0", it.item_id, samples_for(it, [1, 0, 0, 0]))
    assert s.cohort_status(0) == "ready"
    res = s.take_cohort(0)
    assert len(res.groups) == 2 and res.samples_generated == 8
    g = res.groups[0]
    assert g.pool_size == 4 and g.rounds == 1
    assert g.advantages[0] > 0 > g.advantages[1]  # mean 0.25, std-normalised


def test_balance_3_of_24_through_the_scheduler():
    s = make("ada_seq_balance", n_prompts=1, B=1, n=4, samples_per_round=8, max_rounds=4)
    script = [[0] * 8, [1] + [0] * 7, [1, 1] + [0] * 6]
    for r, rewards in enumerate(script):
        (it,) = s.lease("s0", 10, 0.0)
        assert it.round == r and it.num_samples == 8
        s.report("s0", it.item_id, samples_for(it, rewards))
    assert s.lease("s0", 10, 0.0) == []
    (g,) = s.take_cohort(0).groups
    assert (g.pool_size, g.pool_positives, g.rounds, g.exit_fired) == (24, 3, 3, True)
    assert [s_.reward for s_ in g.samples] == [1, 1, 0, 0]
    assert [s_.round for s_ in g.samples] == [1, 2, 0, 0]  # first-collected positives, then negatives
    assert g.advantages == pytest.approx([0.875, 0.875, -0.125, -0.125])
    assert g.round0_rewards == [0.0] * 8


def test_unfinished_prompt_is_kept_with_zero_advantage():
    s = make("ada_seq_balance", n_prompts=1, B=1)
    for _ in range(4):
        (it,) = s.lease("s0", 10, 0.0)
        s.report("s0", it.item_id, samples_for(it, [0] * 8))
    (g,) = s.take_cohort(0).groups
    assert (g.pool_size, g.rounds, g.exit_fired, g.zero_signal) == (32, 4, False, True)
    assert len(g.samples) == 4


def test_pos_rule_stops_on_all_correct_round():
    s = make("ada_seq_pos", n_prompts=1, B=1)
    (it,) = s.lease("s0", 10, 0.0)
    s.report("s0", it.item_id, samples_for(it, [1] * 8))
    (g,) = s.take_cohort(0).groups
    assert g.rounds == 1 and g.exit_fired and g.zero_signal


def test_next_round_before_new_prompts_and_oldest_cohort_first():
    s = make("ada_seq_balance", n_prompts=6, B=2, max_staleness=1)
    first = s.lease("s0", 1, 0.0)[0]
    assert first.cohort == 0
    s.report("s0", first.item_id, samples_for(first, [0] * 8))  # needs another round
    nxt = s.lease("s0", 10, 0.0)
    assert (nxt[0].prompt_id, nxt[0].round) == (first.prompt_id, 1)  # next round first
    assert [i.cohort for i in nxt] == [0, 0, 1, 1]  # then cohort 0's new prompt, then cohort 1


def test_admission_control_bounds_staleness():
    s = make("grpo", n_prompts=20, B=2, max_staleness=1)
    assert sorted({i.cohort for i in s.lease("s0", 100, 0.0)}) == [0, 1]  # version 0: cohorts 0..1
    s.set_version(1)
    assert sorted({i.cohort for i in s.lease("s0", 100, 0.0)}) == [2]
    with pytest.raises(SchedulerError):
        s.set_version(0)


def test_staleness_bound_holds_in_a_random_async_run():
    eta = 2
    s = make("ada_seq_balance", n_prompts=60, B=4, max_staleness=eta, total_steps=10)
    rng = random.Random(0)
    reward = bernoulli_rewards(lambda pid: 0.2)
    leased = []
    step = 0
    while step < 10:
        leased += s.lease("s0", rng.randint(0, 3), 0.0)
        rng.shuffle(leased)
        for it in leased[: rng.randint(0, 3)]:
            s.report("s0", it.item_id, samples_for(it, reward(it)))
            leased.remove(it)
        if s.cohort_status(step) == "ready":
            res = s.take_cohort(step)
            for g in res.groups:
                assert all(step - smp.version <= eta for smp in g.samples)
            step += 1
            s.set_version(step)
    assert s.cohort_status(10) == "end"


def test_sync_mode_round_barrier():
    s = make("ada_seq_balance", n_prompts=2, B=2, mode="sync", max_staleness=5)
    a, b = s.lease("s0", 10, 0.0)
    s.report("s0", a.item_id, samples_for(a, [0] * 8))
    assert s.lease("s0", 10, 0.0) == []  # a's next round waits for b's round 0
    s.report("s0", b.item_id, samples_for(b, [0] * 8))
    assert {i.round for i in s.lease("s0", 10, 0.0)} == {1}


def test_sync_mode_admits_one_cohort_per_version():
    s = make("grpo", n_prompts=10, B=2, mode="sync", max_staleness=3)
    assert {i.cohort for i in s.lease("s0", 10, 0.0)} == {0}


def test_lease_expiry_reissues_same_work_and_late_report_is_ignored():
    s = make("grpo", n_prompts=2, B=1, lease_timeout_s=10.0)
    (it,) = s.lease("dead", 1, now=0.0)
    assert s.lease("s1", 1, now=5.0) == []
    (again,) = s.lease("s1", 1, now=11.0)  # expired: handed out again
    assert (again.prompt_id, again.seed, again.round) == (it.prompt_id, it.seed, it.round)
    assert again.item_id != it.item_id
    assert not s.report("dead", it.item_id, samples_for(it, [1, 0, 0, 0]))
    assert s.report("s1", again.item_id, samples_for(again, [1, 0, 0, 0]))
    acct = s.check_accounting()
    assert (acct["issued"], acct["completed"], acct["reissued"], acct["late_reports"]) == (2, 1, 1, 1)


def test_release_dead_sampler():
    s = make("grpo", n_prompts=4, B=2)
    mine = s.lease("s0", 2, 0.0)
    assert s.release_sampler("s0") == 2
    theirs = s.lease("s1", 10, 0.0)
    assert sorted(i.prompt_id for i in theirs[:2]) == sorted(i.prompt_id for i in mine)
    s.check_accounting()


def test_wrong_sample_count_is_refused():
    s = make("grpo", n_prompts=2, B=1)
    (it,) = s.lease("s0", 1, 0.0)
    with pytest.raises(SchedulerError):
        s.report("s0", it.item_id, samples_for(it, [1, 0]))
    assert s.report("s0", it.item_id, samples_for(it, [1, 0, 1, 0]))  # the lease survived the bad report


def test_dapo_replaces_zero_signal_and_fills_at_cap():
    s = make("dapo", n_prompts=10, B=2, dapo_max_draws_factor=2.0)
    for it in s.lease("s0", 2, 0.0):
        s.report("s0", it.item_id, samples_for(it, [0, 0, 0, 0]))  # both zero-signal: replaced
    repl = s.lease("s0", 10, 0.0)
    assert len(repl) == 2
    for it in repl:
        s.report("s0", it.item_id, samples_for(it, [1, 1, 1, 1]))  # zero-signal again; cap = 4 draws hit
    res = s.take_cohort(0)
    assert len(res.groups) == 2 and len(res.dropped) == 2 and res.draws == 4 and res.dapo_cap_hit
    assert all(g.zero_signal for g in res.groups)
    acct = s.check_accounting()
    assert acct["prompts_dropped"] == 2 and acct["prompts_trained"] == 2


def test_ada_est_allocation_and_all_samples_train():
    est = PassRateEstimator()
    est.update("p0", 32, 0)  # hard prompt gets more
    est.update("p3", 32, 32)  # easy prompt gets fewer
    s = make("ada_est", n_prompts=4, B=4, est_mean_samples=8, estimator=est)
    items = {i.prompt_id: i for i in s.lease("s0", 10, 0.0)}
    sizes = {pid: it.num_samples for pid, it in items.items()}
    assert sum(sizes.values()) == 32 and sizes["p0"] > sizes["p1"] == sizes["p2"] > sizes["p3"]
    for it in items.values():
        s.report("s0", it.item_id, samples_for(it, [1] + [0] * (it.num_samples - 1)))
    groups = {g.prompt_id: g for g in s.take_cohort(0).groups}
    assert all(len(groups[p].samples) == sizes[p] for p in sizes)


def test_end_of_data_partial_cohort_then_end():
    s = make("grpo", n_prompts=5, B=2, total_epochs=1, max_staleness=10)
    drain(s, lambda it: [1, 0, 0, 0])
    assert [len(s.take_cohort(c).groups) for c in range(3)] == [2, 2, 1]
    assert s.cohort_status(3) == "end"
    acct = s.check_accounting()
    assert acct["prompts_drawn"] == acct["prompts_trained"] == 5


def test_epochs_visit_every_prompt_once_each():
    s = make("grpo", n_prompts=6, B=3, total_epochs=2, max_staleness=10)
    drain(s, lambda it: [1, 0, 0, 0])
    seen = [g.prompt_id for c in range(4) for g in s.take_cohort(c).groups]
    assert sorted(seen[:6]) == sorted(seen[6:]) == [f"p{i}" for i in range(6)]


def test_item_seed_is_stable_and_distinct():
    assert item_seed(0, "p", 1, 2) == item_seed(0, "p", 1, 2)
    assert len({item_seed(0, "p", c, r) for c in range(10) for r in range(4)}) == 40


def test_checkpoint_mid_flight_gives_identical_groups():
    reward = bernoulli_rewards(lambda pid: 0.15)

    def run(split_at):
        s = make("ada_seq_balance", n_prompts=12, B=3, max_staleness=1, total_steps=4)
        out, step, reports = [], 0, 0
        while step < 4:
            items = s.lease("s0", 2, 0.0)
            for it in items:
                s.report("s0", it.item_id, samples_for(it, reward(it)))
                reports += 1
                if reports == split_at:
                    state = s.state_dict()
                    s = make("ada_seq_balance", n_prompts=12, B=3, max_staleness=1, total_steps=4)
                    s.load_state_dict(state)
                    break  # the rest of this lease batch is lost with the "crash"
            while s.cohort_status(step) == "ready":
                out.append([(g.prompt_id, [x.reward for x in g.samples], g.advantages) for g in s.take_cohort(step).groups])
                step += 1
                s.set_version(step)
        s.check_accounting()
        return out

    assert run(split_at=7) == run(split_at=-1)


def test_epoch_boundary_never_puts_a_prompt_twice_in_a_cohort():
    # 7 prompts, cohorts of 3, 4 epochs: boundaries fall inside cohorts
    s = make("grpo", n_prompts=7, B=3, total_epochs=4, max_staleness=100, seed=3)
    drain(s, lambda it: [1, 0, 0, 0])
    seen = []
    c = 0
    while s.cohort_status(c) == "ready":
        ids = [g.prompt_id for g in s.take_cohort(c).groups]
        assert len(ids) == len(set(ids)), (c, ids)
        seen += ids
        c += 1
    assert s.cohort_status(c) == "end"
    assert sorted(seen) == sorted([f"p{i}" for i in range(7)] * 4)  # every prompt once per epoch
    s.check_accounting()


def test_many_epochs_random_sizes():
    for n, b in ((5, 2), (11, 4), (9, 9), (4, 3)):
        s = make("grpo", n_prompts=n, B=b, total_epochs=5, max_staleness=1000, seed=n)
        drain(s, lambda it: [1, 0, 0, 0])
        c, seen = 0, []
        while s.cohort_status(c) == "ready":
            ids = [g.prompt_id for g in s.take_cohort(c).groups]
            assert len(ids) == len(set(ids))
            seen += ids
            c += 1
        assert len(seen) == 5 * n
        s.check_accounting()


@pytest.mark.timeout(10)
def test_fewer_prompts_than_the_batch_is_refused_not_looped_on():
    # one prompt, cohorts of 2: drawing a second distinct prompt used to defer forever
    with pytest.raises(ValueError, match="batch_prompts = 2 is more than the 1 prompts"):
        make("grpo", n_prompts=1, B=2)


@pytest.mark.timeout(10)
def test_dapo_replacement_when_the_cohort_holds_every_prompt_is_bounded():
    # B = N: no prompt is left to replace a zero-signal group (epochs unbounded: the draw used to loop forever)
    s = make("dapo", n_prompts=2, B=2, dapo_max_draws_factor=3.0)
    for it in s.lease("s0", 2, 0.0):
        s.report("s0", it.item_id, samples_for(it, [0, 0, 0, 0]))
    res = s.take_cohort(0)
    assert len(res.groups) == 2 and res.dropped == [] and res.dapo_cap_hit and res.draws == 2
    assert len(s.deferred) == 0
    s.set_version(1)  # the next cohort still draws both prompts
    assert sorted(it.prompt_id for it in s.lease("s0", 10, 0.0)) == ["p0", "p1"]
    s.check_accounting()


def test_release_reissues_only_that_samplers_items_under_new_ids():
    s = make("grpo", n_prompts=6, B=3)
    (a,) = s.lease("dead", 1, 0.0)
    (b,) = s.lease("alive", 1, 0.0)
    assert s.release_sampler("dead") == 1
    third, again = s.lease("other", 10, 0.0)  # the cohort's last new prompt, then the dead sampler's work
    assert (again.prompt_id, again.seed) == (a.prompt_id, a.seed) and again.item_id not in (a.item_id, b.item_id)
    assert third.prompt_id not in (a.prompt_id, b.prompt_id)
    assert s.report("alive", b.item_id, samples_for(b, [1, 0, 0, 0]))  # the live sampler's lease survived
    assert not s.report("dead", a.item_id, samples_for(a, [1, 0, 0, 0]))  # late
    a = s.check_accounting()
    assert (a["issued"], a["completed"], a["reissued"], a["late_reports"], a["outstanding"]) == (4, 1, 1, 1, 2)
