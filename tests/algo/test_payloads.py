"""Payloads off the control plane (algo/payloads.py) and the scheduler's rules when they are lost:
a report batch packs and fills back exactly; a sample without its payload refuses to be read; a
sampler's death restarts every prompt of an open cohort that holds one of its samples (in flight or
finished, its outstanding item cancelled, the accounting balanced), and a cohort taken but not trained
comes back whole but for those prompts."""

from __future__ import annotations

import pickle

import pytest

from ada_ray.algo.payloads import (LocalPayloadStore, LostPayloads, OwnedBatches, fetch_into, fill, pack, payload_expired,
                                  remote_batches, remote_sample)
from ada_ray.algo.scheduler import SchedulerError
from ada_ray.algo.types import PayloadNotFetched, Sample, SampleBlock
from ada_ray.learner.batching import fill_rows, learner_shares, share_batches
from tests.algo.test_scheduler import make


def test_a_batch_packs_and_fills_back_exactly():
    ids, lps, texts = [[5, 6, 2], [], [7]], [[-0.1, -0.25, -1e-9], [], []], ["a", "", "c"]
    arrays = pack(ids, lps, texts)
    assert arrays["offsets"].tolist() == [0, 3, 3, 4] and arrays["has_logprobs"].tolist() == [True, True, False]
    store = LocalPayloadStore()
    batch = store.put(arrays, "sampler-0")
    samples = [remote_sample("p", 1.0, 3, batch, i, len(t)) for i, t in enumerate(ids)]
    assert [s.num_tokens for s in samples] == [3, 0, 1] and all(s.remote for s in samples)
    with pytest.raises(PayloadNotFetched, match="off the control plane"):
        samples[0].completion_ids
    assert remote_batches(samples) == [batch]
    assert fetch_into(store, samples, 1.0) == 3
    assert [s.completion_ids for s in samples] == ids
    assert samples[0].behaviour_logprobs == [-0.1, -0.25, -1e-9]  # float64: exact
    assert samples[2].behaviour_logprobs == [] and [s.text for s in samples] == texts
    assert not any(s.remote for s in samples)


def test_log_probs_of_the_wrong_length_are_refused_naming_the_row():
    with pytest.raises(ValueError, match="payload row 1: 1 log-probs for 2 tokens"):
        pack([[1], [2, 3]], [[0.0], [0.0]], ["", ""])


def test_a_remote_sample_crosses_processes_as_metadata_and_its_batch():
    store = LocalPayloadStore()
    batch = store.put(pack([[1, 2]], [[-0.5, -0.5]], ["x"]), "sampler-1")
    s = remote_sample("p", 0.0, 2, batch, 0, 2, round_=1)
    t = pickle.loads(pickle.dumps(s))
    assert t.remote and t.payload[0] == batch and t.payload[1:] == (0, 2) and t.round == 1
    assert len(pickle.dumps(s)) < len(pickle.dumps(Sample("p", [1] * 500, [-0.5] * 500, 0.0, 2)))
    fill([t], {batch.key: store.fetch([batch], 1.0)[batch.key]})
    assert t.completion_ids == [1, 2]


def test_a_dead_owners_batches_are_lost_and_the_error_names_them():
    store = LocalPayloadStore()
    a, b = store.put(pack([[1]], [[0.0]], [""]), "s0"), store.put(pack([[2]], [[0.0]], [""]), "s1")
    store.kill("s0")
    with pytest.raises(LostPayloads) as e:
        store.fetch([a, b], 1.0)
    assert e.value.owners == ["s0"] and e.value.batches == [a]


def test_learner_rows_carry_the_batch_and_fill_from_one_fetch():
    s, store = _sched(), LocalPayloadStore()
    _run_cohort(s, store)
    res = s.take_cohort(0)
    shares = learner_shares(res.groups, 2, 1)
    rows = [r for share in shares for rs, _, _ in share for r in rs]
    assert all("payload" in r and "completion" not in r for r in rows)
    assert shares[0][0][1] == sum(g.samples[0].num_tokens * len(g.samples) for g in res.groups)  # tokens known
    for share in shares:
        fill_rows(share, store.fetch(share_batches(share), 1.0))
    assert all(r["completion"] == [5, 2] and r["behaviour_logprobs"] == [-0.1, -0.2] for r in rows)


# -- the scheduler when payloads are lost ------------------------------------------------------


def _sched(**kw):
    kw.setdefault("name", "ada_seq_balance")
    return make(n_prompts=6, B=2, n=2, samples_per_round=2, max_rounds=3, **kw)


REPORT_FORM = {"blocks": False}


@pytest.fixture(autouse=True, params=["sample lists", "blocks"])
def report_form(request):
    """Every test here runs with reports as one Sample a sample and as one SampleBlock an item."""
    REPORT_FORM["blocks"] = request.param == "blocks"
    yield request.param
    REPORT_FORM["blocks"] = False


def _report(s, store, owner, it, rewards):
    batch = store.put(pack([[5, 2]] * len(rewards), [[-0.1, -0.2]] * len(rewards), [""] * len(rewards)), owner,
                      it.version)
    if REPORT_FORM["blocks"]:
        return s.report(owner, it.item_id, SampleBlock(it.prompt_id, it.version, [float(r) for r in rewards],
                                                       [2] * len(rewards), batch, 0))
    return s.report(owner, it.item_id, [remote_sample(it.prompt_id, float(r), it.version, batch, i, 2)
                                        for i, r in enumerate(rewards)])


def _run_cohort(s, store, owner="s0"):
    """Report every item of cohort 0 from `owner` (one right, one wrong each round) until it is ready."""
    while s.cohort_status(0) != "ready":
        for it in s.lease(owner, 10, 0.0):
            if it.cohort == 0:
                _report(s, store, owner, it, [1, 0])
            else:
                s.release_sampler("x")


def test_a_dead_samplers_samples_restart_their_prompts_and_nothing_else():
    s, store = _sched(), LocalPayloadStore()
    items = s.lease("s0", 1, 0.0) + s.lease("s1", 1, 0.0)
    assert [it.cohort for it in items] == [0, 0]
    _report(s, store, "s0", items[0], [1, 1])  # prompt A: a round from s0 (no pair yet: its next round is ready)
    _report(s, store, "s1", items[1], [1, 1])  # prompt B: a round from s1
    nxt = s.lease("s1", 10, 0.0)  # s1 leases A's and B's next rounds
    assert {it.prompt_id for it in nxt} == {items[0].prompt_id, items[1].prompt_id}
    assert s.lose_owners(["s0"]) == 1  # A restarts from round 0; B keeps its pool
    assert s.prompt_counts.prompts_reissued == 1
    st_a = s.inflight[(0, items[0].prompt_id)]
    assert st_a.rounds_done == 0 and st_a.pool == []
    assert s.inflight[(0, items[1].prompt_id)].rounds_done == 1
    a_lease = next(it for it in nxt if it.prompt_id == items[0].prompt_id)
    assert not _report(s, store, "s1", a_lease, [1, 0])  # its cancelled item's report changes nothing
    again = s.lease("s1", 10, 0.0)
    assert [(it.prompt_id, it.round) for it in again] == [(items[0].prompt_id, 0)]
    acc = s.check_accounting()
    assert acc["items_ok"] and acc["prompts_ok"] and acc["cancelled"] == 1 and acc["prompts_reissued"] == 1


def test_a_finished_group_with_a_lost_sample_leaves_its_cohort_until_sampled_again():
    s, store = _sched(name="grpo"), LocalPayloadStore()
    items = s.lease("s0", 1, 0.0) + s.lease("s1", 1, 0.0)
    _report(s, store, "s0", items[0], [1, 0])
    _report(s, store, "s1", items[1], [0, 1])
    assert s.cohort_status(0) == "ready"
    assert s.lose_owners(["s1"]) == 1
    assert s.cohort_status(0) == "pending"
    it = s.lease("s0", 10, 0.0)
    it = [x for x in it if x.cohort == 0]
    assert [(x.prompt_id, x.round) for x in it] == [(items[1].prompt_id, 0)]
    _report(s, store, "s0", it[0], [1, 1])
    res = s.take_cohort(0)
    assert [g.prompt_id for g in res.groups] == [items[0].prompt_id, items[1].prompt_id]  # the drawn order
    assert all(smp.payload[0].owner == "s0" for g in res.groups for smp in g.samples)
    assert res.draws == 2 and s.check_accounting()["prompts_ok"]


def test_a_taken_cohort_comes_back_whole_but_for_the_lost_prompts():
    s, store = _sched(name="grpo"), LocalPayloadStore()
    items = s.lease("s0", 1, 0.0) + s.lease("s1", 1, 0.0)
    _report(s, store, "s0", items[0], [1, 0])
    _report(s, store, "s1", items[1], [0, 1])
    res = s.take_cohort(0)
    assert s.prompt_counts.prompts_trained == 2
    with pytest.raises(SchedulerError, match="only the last cohort taken"):
        s.return_cohort(type(res)(5, [], [], 0, False, 0), ["s1"])
    assert s.return_cohort(res, ["s1"]) == 1
    assert s.prompt_counts.prompts_trained == 0 and s.first_untaken == 0
    assert s.cohort_status(0) == "pending" and s.check_accounting()["prompts_ok"]
    redo = [x for x in s.lease("s0", 10, 0.0) if x.cohort == 0]
    assert [(x.prompt_id, x.round) for x in redo] == [(items[1].prompt_id, 0)]
    _report(s, store, "s0", redo[0], [1, 0])
    again = s.take_cohort(0)
    assert [g.prompt_id for g in again.groups] == [g.prompt_id for g in res.groups]
    assert again.samples_generated == 6  # the lost samples were generated too: counted once each
    assert s.check_accounting()["prompts_ok"]


def test_a_checkpoint_needs_every_payload_filled_first():
    s, store = _sched(), LocalPayloadStore()
    items = s.lease("s0", 2, 0.0)
    _report(s, store, "s0", items[0], [1, 1])
    with pytest.raises(PayloadNotFetched):
        s.state_dict()
    held = list(s.held_samples())
    assert fetch_into(store, held, 1.0) == 2
    state = s.state_dict()
    assert state["inflight"][0]["pool"][0]["completion_ids"] == [5, 2]


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
@pytest.mark.parametrize("expire", [True, False])
def test_owners_drop_batches_no_cohort_can_train_and_every_cohort_still_fetches_over_a_thousand_steps(
        max_staleness, expire):
    """The fake-backed loop (scheduler, a sampler reporting one batch an item, a learner fetching each
    cohort, the owner expiring batches as its weights advance): every cohort's fetch finds all its
    batches (admission control: nothing a cohort trains is older than the rule keeps), and what the owner
    holds stays bounded by max_staleness + 2 versions of work - nothing grows with the steps. Without
    expiry (`expire=False`) the owner keeps everything: the bound is what expiry buys."""
    import random

    s, store = _sched(max_staleness=max_staleness), LocalPayloadStore()
    rng = random.Random(0)
    live, dropped = [], 0
    for step in range(1000):
        while s.cohort_status(step) != "ready":
            items = s.lease("s0", 4, 0.0)
            assert items, f"step {step}: no work and no cohort"
            for it in items:
                _report(s, store, "s0", it, [int(rng.random() < 0.5) for _ in range(it.num_samples)])
        res = s.take_cohort(step)
        store.fetch(remote_batches(x for g in res.groups for x in g.samples), 1.0)  # the learner's: never lost
        del res
        s.set_version(step + 1)
        if expire:
            dropped += store.expire(step + 1, max_staleness)
        live.append(store.live)
    if not expire:
        assert live[-1] > 1000
        return
    assert dropped > 1000 and 0 < max(live) <= 40  # a bound, while 1,000 steps of work is > 3,000 batches
    assert s.check_accounting()["prompts_ok"]


def test_a_batch_expires_once_the_weights_pass_it_by_max_staleness_and_one():
    """Worked example (max_staleness = 2): a batch whose newest sample started under version 3 can be
    trained by cohorts up to 5; weights at 6 still keep it (the margin), at 7 it is dropped."""
    assert [payload_expired(3, v, 2) for v in (3, 4, 5, 6, 7, 8)] == [False] * 4 + [True] * 2
    assert [payload_expired(3, v, 0) for v in (3, 4, 5)] == [False, False, True]
    owned = OwnedBatches()
    owned.add("a", "ref-a", 3)
    owned.add("b", "ref-b", 5)
    assert owned.expire(6, 2) == 0 and owned.handles(["a", "b", "c"]) == ["ref-a", "ref-b", None]
    assert owned.expire(7, 2) == 1 and owned.handles(["a", "b"]) == [None, "ref-b"] and len(owned) == 1


def test_an_expired_batch_is_lost_and_says_so():
    store = LocalPayloadStore()
    old, new = store.put(pack([[1]], [[0.0]], [""]), "s0", 1), store.put(pack([[2]], [[0.0]], [""]), "s0", 4)
    assert store.expire(5, 2) == 1 and store.live == 1
    with pytest.raises(LostPayloads, match="expired") as e:
        store.fetch([old, new], 1.0)
    assert e.value.batches == [old]
