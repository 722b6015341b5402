"""The scheduler's checkpoint: record <-> dict round trips through JSON, and the queue.json format
kept byte for byte from before the scheduler was split (data/queue_states_before_split.json: three
mid-flight queues saved by that code, with the cohorts it trained after loading them)."""

import json
import random
from pathlib import Path

import pytest

from ada_ray.algo import scheduler_state as ss
from ada_ray.algo.leases import ItemCounts
from ada_ray.algo.scheduler import SchedulerError
from ada_ray.algo.strategies import PromptState
from ada_ray.algo.types import Group, Prompt, Sample
from tests.algo.test_scheduler import bernoulli_rewards, make, samples_for

BEFORE_SPLIT = Path(__file__).parent / "data" / "queue_states_before_split.json"
SCENARIOS = [("ada_seq_balance", "async", 12), ("dapo", "sync", 14), ("ada_seq_balance", "sync", 14)]


def via_json(d):
    return json.loads(json.dumps(d))


def sample(reward, round_=0):
    return Sample("p0", [5, 2], [-0.25, -1.5], reward, version=3, round=round_, text="x", finish_reason="length",
                  reward_error=True)


def scheduler(name, mode):
    return make(name, n_prompts=5, B=2, max_staleness=1, mode=mode, total_epochs=3, seed=7, lease_timeout_s=5.0)


def mid_flight(name, mode, steps):
    """A queue with trained cohorts, finished and in-flight prompts, open leases, a released sampler."""
    s = scheduler(name, mode)
    reward = bernoulli_rewards(lambda pid: 0.3)
    rng = random.Random(1)
    leased, step = [], 0
    for t in range(steps):
        leased += s.lease(f"s{t % 2}", rng.randint(1, 3), now=float(t))
        for it in leased[: rng.randint(0, 2)]:
            s.report("s", it.item_id, samples_for(it, reward(it)))
        leased = leased[2:]
        if s.cohort_status(step) == "ready":
            s.take_cohort(step)
            step += 1
            s.set_version(step)
        if t == 5:
            s.release_sampler("s1")
    return s


def continue_to_end(s, step):
    reward = bernoulli_rewards(lambda pid: 0.3)
    out = []
    for _ in range(1000):
        for it in s.lease("s0", 1000, now=100.0):
            s.report("s0", it.item_id, samples_for(it, reward(it)))
        while s.cohort_status(step) == "ready":
            out.append([[g.prompt_id, [x.reward for x in g.samples], g.advantages, g.pool_size]
                        for g in s.take_cohort(step).groups])
            step += 1
            s.set_version(step)
        if s.cohort_status(step) == "end":
            return out, s.check_accounting()
    raise AssertionError("the run did not end")


def test_sample_and_group_round_trip_through_json():
    smp = sample(1.0, round_=2)
    assert ss.sample_from_dict(via_json(ss.sample_to_dict(smp))) == smp
    g = Group("p0", [1, 2], [smp, sample(0.0)], [0.5, -0.5], cohort=4, pool_size=16, pool_positives=3, rounds=2,
              exit_fired=True, round0_rewards=[0.0] * 8, difficulty="2x1", dropped=True)
    assert ss.group_from_dict(via_json(ss.group_to_dict(g))) == g


def test_prompt_state_and_cohort_round_trip_through_json():
    p = Prompt("p0", "q", (1, 2), "a")
    st = PromptState(p, 3, 0.7)
    st.add_round([sample(0.0), sample(1.0)])
    st.add_round([sample(1.0, 1)])
    back = ss.prompt_state_from_dict(via_json(ss.prompt_state_to_dict(st)), p, 0.7)
    assert back == st and back.round0_rewards == [0.0, 1.0] and len(back.pos) == 2
    g = Group("p0", [1, 2], [sample(1.0)], [0.0], 3, 1, 1, 1, True)
    co = ss.Cohort(3, target=2, admitted=["p0", "p1"], groups={"p0": g}, dropped=[g], draws=3, cap_hit=True,
                   samples=9)
    assert ss.cohort_from_dict(via_json(ss.cohort_to_dict(co))) == co


def test_accounting_keys_and_order_and_old_files():
    items, prompts = ItemCounts(5, 3, 1, 1, 2), ss.PromptCounts(4, 2, 1, 1)
    d = ss.accounting_to_dict(items, prompts)
    assert list(d) == ["issued", "completed", "reissued", "cancelled", "late_reports", "prompts_drawn",
                       "prompts_trained", "prompts_dropped", "prompts_cancelled", "prompts_reissued"]
    assert ss.accounting_from_dict(via_json(d)) == (items, prompts)
    assert ss.accounting_from_dict({"issued": 2}) == (ItemCounts(issued=2), ss.PromptCounts())
    with pytest.raises(TypeError):
        ss.accounting_from_dict({**d, "surprise": 1})


@pytest.mark.parametrize("name,mode,steps", SCENARIOS)
def test_state_dict_round_trip_through_json(name, mode, steps):
    state = mid_flight(name, mode, steps).state_dict()
    assert state["work"] and state["inflight"] and state["accounting"]["reissued"] > 0
    s2 = scheduler(name, mode)
    s2.load_state_dict(via_json(state))
    again = s2.state_dict()
    # the saved work is queued again under new ids, oldest cohort and round first
    assert again["next_item_id"] == state["next_item_id"] + len(state["work"])
    by_place = lambda w: (w["cohort"], w["round"], w["prompt_id"])  # noqa: E731
    assert sorted(again.pop("work"), key=by_place) == sorted(state.pop("work"), key=by_place)
    again.pop("next_item_id"), state.pop("next_item_id")
    assert again == state
    s2.check_accounting()


@pytest.mark.parametrize("name,mode,steps", SCENARIOS)
def test_queue_json_is_the_format_from_before_the_split(name, mode, steps):
    before = json.loads(BEFORE_SPLIT.read_text())[f"{name}/{mode}"]
    state = mid_flight(name, mode, steps).state_dict()
    assert state["accounting"].pop("prompts_reissued") == 0  # the one key added since (lost payloads), last
    assert json.dumps(state) == json.dumps(before["state"])  # byte for byte


@pytest.mark.parametrize("name,mode,steps", SCENARIOS)
def test_an_old_queue_json_loads_and_trains_what_it_trained_before(name, mode, steps):
    before = json.loads(BEFORE_SPLIT.read_text())[f"{name}/{mode}"]
    s = scheduler(name, mode)
    s.load_state_dict(before["state"])
    cohorts, acct = continue_to_end(s, before["state"]["first_untaken"])
    assert via_json(cohorts) == before["cohorts_after_resume"]
    assert acct.pop("prompts_reissued") == 0
    assert acct == before["accounting_at_end"]


def test_a_queue_from_other_data_is_refused():
    state = mid_flight("ada_seq_balance", "async", 12).state_dict()
    state["inflight"][0]["prompt_id"] = "not-in-this-dataset"
    with pytest.raises(SchedulerError, match="not-in-this-dataset.*different data"):
        scheduler("ada_seq_balance", "async").load_state_dict(state)
