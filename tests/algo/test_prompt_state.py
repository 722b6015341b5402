"""Reports as columns (SampleBlock) and the pool that keeps them (algo/prompt_state.py): a block crosses
processes as lists, builds a Sample only where one is read, and the scheduler gives exactly the groups
it gives for the same samples reported one object a sample - for every algorithm, over many cohorts."""

from __future__ import annotations

import pickle
import random

import pytest

from ada_ray.algo import scheduler_state as ss
from ada_ray.algo.payloads import LocalPayloadStore, pack, remote_sample
from ada_ray.algo.prompt_state import PromptState
from ada_ray.algo.types import PayloadBatch, Prompt, Sample, SampleBlock
from tests.algo.test_scheduler import make


def batch(key="b0", owner="s0") -> PayloadBatch:
    return PayloadBatch(key, owner, [None])


def test_a_block_travels_as_lists_and_builds_only_what_is_read():
    b = SampleBlock("p", 3, [1.0, 0.0, 0.0], [5, 6, 7], batch(), 10, errors=[False, True, False])
    wire = pickle.dumps(b)
    assert b"Sample" not in wire.replace(b"SampleBlock", b"")  # no per-sample object on the wire
    back = pickle.loads(wire)
    assert back == b and len(back) == 3 and not back.materialized
    s = back[1]
    assert s == back[1] and s is back[1]  # built once, kept
    assert (s.prompt_id, s.reward, s.version, s.reward_error, s.finish_reason, s.payload[1:]) == ("p", 0.0, 3, True,
                                                                                                    "stop", (11, 6))
    assert back._samples[0] is None and back._samples[2] is None  # the others were never built
    back.set_round(2)
    assert s.round == 2 and back[0].round == 2  # built before and after
    assert isinstance(pickle.loads(pickle.dumps(back)), list)  # once built (maybe filled), samples travel whole


def test_a_block_of_mismatched_columns_is_refused_naming_the_prompt():
    with pytest.raises(ValueError, match="SampleBlock of prompt p7: 2 rewards but 3 token counts"):
        SampleBlock("p7", 0, [1.0, 0.0], [1, 2, 3], batch(), 0)
    with pytest.raises(ValueError, match="1 finish reasons"):
        SampleBlock("p7", 0, [1.0, 0.0], [1, 2], batch(), 0, finish=["length"])


def test_the_pool_counts_without_building_and_downsampling_builds_the_kept():
    st = PromptState(Prompt("p", "q", (1,), "a"), 0, 0.7)
    r0 = SampleBlock("p", 0, [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], [3] * 8, batch(), 0)
    r1 = [Sample("p", [1], [0.0], 1.0, 1, round=1)]
    st.add_round(r0)
    st.add_round(r1)
    assert (st.pool_size, len(st.pos), len(st.neg), st.rounds_done) == (9, 3, 6, 2)
    assert st.round0_rewards == r0.rewards and st.rewards == r0.rewards + [1.0]
    assert not r0.materialized  # counted from the rewards
    assert st.pos.rewards == [1.0, 1.0, 1.0] and st.pos[:2] == [r0[1], r0[4]]
    assert [x is None for x in r0._samples] == [True, False, True, True, False, True, True, True]
    assert st.neg[-1] is r0[7] and list(st.pool)[8] is r1[0] and st.pool[8] is r1[0]
    assert st.pool == list(st.pool) and st.pool != list(st.pool)[:-1]


def test_a_state_of_blocks_round_trips_through_json():
    store = LocalPayloadStore()
    b = store.put(pack([[5, 6], [7]], [[-0.5, -0.25], [-1.0]], ["x", "y"]), "s0")
    st = PromptState(Prompt("p", "q", (1,), "a"), 2, 0.7)
    st.add_round(SampleBlock("p", 1, [1.0, 0.0], [2, 1], b, 0))
    from ada_ray.algo.payloads import fill
    fill(st.pool, store.fetch([b], 1.0))  # a checkpoint fills every held sample first
    back = ss.prompt_state_from_dict(ss.prompt_state_to_dict(st), st.prompt, 0.7)
    assert back == st and [s.completion_ids for s in back.pool] == [[5, 6], [7]] and back.round0_rewards == [1.0, 0.0]


@pytest.mark.parametrize("name", ["grpo", "dapo", "ada_seq_pos", "ada_seq_balance", "ada_est", "ada_budget"])
def test_blocks_and_sample_lists_give_the_same_groups(name):
    """Every algorithm, 12 cohorts of random rewards: the groups, advantages, kept samples' payload rows and
    the accounting are the same whether a report is one SampleBlock an item or one Sample a sample."""
    def run(blocks: bool):
        s = make(name, n_prompts=40, B=8, max_staleness=1, total_steps=12, seed=5)
        rng, out, row = random.Random(0), [], 0
        for c in range(12):
            while items := s.lease("s0", 7, 0.0):
                for it in items:
                    rewards = [float(rng.random() < 0.3) for _ in range(it.num_samples)]
                    b = batch(f"b{it.item_id}")
                    rep = (SampleBlock(it.prompt_id, it.version, rewards, [4] * len(rewards), b, row) if blocks else
                           [remote_sample(it.prompt_id, r, it.version, b, row + j, 4) for j, r in enumerate(rewards)])
                    row += len(rewards)
                    assert s.report("s0", it.item_id, rep)
            res = s.take_cohort(c)
            s.set_version(c + 1)
            out.append([(g.prompt_id, g.advantages, [(x.reward, x.round, x.version, x.payload[0].key, x.payload[1])
                                                     for x in g.samples], g.pool_size, g.pool_positives, g.rounds,
                         g.exit_fired, g.round0_rewards) for g in res.groups + res.dropped])
        return out, s.check_accounting()

    assert run(True) == run(False)


def test_a_kept_group_leaves_the_queue_without_a_sample_built_there():
    """Seq-balance keeps a view of the pool (pool indices): finalizing the group and pickling it for the
    driver build no Sample in the queue; the unpickled group holds Samples equal to those the pool would
    build, a sample read (and filled) in the queue travels as it is."""
    s = make("ada_seq_balance", n_prompts=4, B=2, max_staleness=0)
    blocks, row = [], 0
    while items := s.lease("s0", 8, 0.0):
        for it in items:
            rewards = [1.0, 0.0] * (it.num_samples // 2)  # a pair in the first round: one round a prompt
            blocks.append(SampleBlock(it.prompt_id, it.version, rewards, [3] * len(rewards), batch(f"b{it.item_id}"), row))
            row += len(rewards)
            assert s.report("s0", it.item_id, blocks[-1])
    res = s.take_cohort(0)
    assert len(res.groups) == 2 and all(len(g.samples) == 4 for g in res.groups)
    wire = pickle.dumps(res)
    assert not any(b.materialized for b in blocks)  # finalized and pickled: nothing built in the queue
    back = pickle.loads(wire)
    for g, h in zip(res.groups, back.groups):
        assert isinstance(h.samples, list) and all(isinstance(x, Sample) for x in h.samples)
        assert h.samples == list(g.samples) and h.advantages == g.advantages and h == g
        assert [x.reward for x in h.samples] == [1.0, 1.0, 0.0, 0.0]  # balanced: 2 positives, 2 negatives
        assert [x.payload[1] for x in h.samples] == [x.payload[1] for x in g.samples]
    assert not any(f in wire for f in (b"_sample_from_wire", b"_block_from_wire", b"_group_from_wire", b"Group"))  # columns
    first = res.groups[0].samples[0]  # read in the queue and filled: it travels filled
    first.fill_payload([5, 6, 7], [-0.5, -0.25, -1.0], "abc")
    again = pickle.loads(pickle.dumps(res.groups[0]))
    assert again.samples[0].completion_ids == [5, 6, 7] and again.samples[0].text == "abc"
    assert again.samples[1].remote  # the others still name their payload


def test_a_cohort_travels_as_columns_with_kept_dropped_and_mixed_pools():
    """A cohort pickles its groups together (types.groups_to_wire): a pool of unread SampleBlocks as its
    rounds and the kept indices (taken over several rounds, in the group's order), a group of Sample lists
    as each sample's wire; kept and dropped groups come back as they were, in order."""
    from ada_ray.algo.scheduler import CohortResult
    from ada_ray.algo.types import Group

    st = PromptState(Prompt("p", "q", (1,), "a"), 3, 0.5)
    r0 = SampleBlock("p", 1, [0.0, 0.0, 1.0], [3, 4, 5], batch("b0"), 0, finish=["stop", "length", "stop"])
    r1 = SampleBlock("p", 2, [1.0, 0.0], [6, 7], batch("b1"), 9, errors=[False, True], round_=1)
    st.add_round(r0)
    st.add_round(r1)
    viewed = Group("p", [1], st.view([2, 3, 4, 0]), [0.5, 0.5, -0.5, -0.5], 3, 5, 2, 2, True, [0.0, 0.0, 1.0])
    listed = Group("q", [2, 2], [Sample("q", [4], [-0.5], 1.0, 2, text="t")], [0.0], 3, 1, 1, 1, False, [1.0], "hard",
                   dropped=True)
    empty = Group("e", [], [], [], 3, 0, 0, 0, False)
    res = CohortResult(3, [viewed, empty], [listed], draws=3, dapo_cap_hit=True, samples_generated=6, skipped=1)
    back = pickle.loads(pickle.dumps(res))
    assert not r0.materialized and not r1.materialized  # pickled from the rounds' columns
    assert (back.index, back.draws, back.dapo_cap_hit, back.samples_generated, back.skipped) == (3, 3, True, 6, 1)
    assert back.groups == [viewed, empty] and back.dropped == [listed]
    got = back.groups[0].samples
    assert [(x.reward, x.version, x.round, x.payload[0].key, x.payload[1:], x.finish_reason, x.reward_error)
            for x in got] == [(1.0, 1, 0, "b0", (2, 5), "stop", False), (1.0, 2, 1, "b1", (9, 6), "stop", False),
                              (0.0, 2, 1, "b1", (10, 7), "stop", True), (0.0, 1, 0, "b0", (0, 3), "stop", False)]
    assert back.dropped[0].samples[0].completion_ids == [4] and back.dropped[0].difficulty == "hard"
    r1[0]  # a sample read in the queue (maybe filled there): the kept samples travel as wires
    assert st.pool_wire([0]) is None and pickle.loads(pickle.dumps(res)).groups == [viewed, empty]


def test_a_pool_read_in_the_queue_travels_as_wires_without_building_the_rest():
    """One sample of a pool read (maybe filled) in the queue: the kept group pickles each kept sample's wire
    (PoolView.to_wire), building no other sample there."""
    from ada_ray.algo.types import Group

    st = PromptState(Prompt("p", "q", (1,), "a"), 0, 0.5)
    r0 = SampleBlock("p", 1, [0.0, 1.0], [3, 4], batch("b0"), 0)
    r1 = SampleBlock("p", 1, [1.0, 0.0], [5, 6], batch("b1"), 0, round_=1)
    st.add_round(r0)
    st.add_round(r1)
    r1[1].fill_payload([8], [-0.5], "x")
    g = Group("p", [1], st.view([1, 3, 0, 2]), [0.5, -0.5, -0.5, 0.5], 0, 4, 2, 2, True)
    back = pickle.loads(pickle.dumps(g))
    assert not r0.materialized and [x is not None for x in r1._samples] == [False, True]
    assert [x.reward for x in back.samples] == [1.0, 0.0, 0.0, 1.0] and back.samples[1].completion_ids == [8]
    assert back.samples[0].payload[1:] == (1, 4) and back.samples[3].payload[0].key == "b1"
