"""A Sample's token ids and log-probs cross processes packed (types.PackedList): equal after the
trip, exact, never unpacked by a hop that does not read them, and a bad value is named."""

import copy
import math
import pickle

import pytest

from ada_ray.algo.types import Sample


def _sample(**kw) -> Sample:
    d = dict(prompt_id="p7", completion_ids=[5, 0, 2**31 - 1, 17], behaviour_logprobs=[-0.1, -1e-300, 0.0, -math.inf],
             reward=1.0, version=3, round=2, text="x", finish_reason="length", reward_error=True)
    d.update(kw)
    return Sample(**d)


def test_round_trip_is_exact_and_equal():
    s = _sample()
    t = pickle.loads(pickle.dumps(s))
    assert t == s
    assert t.completion_ids == [5, 0, 2**31 - 1, 17]
    assert t.behaviour_logprobs == [-0.1, -1e-300, 0.0, -math.inf]
    assert (t.reward, t.version, t.round, t.text, t.finish_reason, t.reward_error) == (1.0, 3, 2, "x", "length", True)


def test_a_hop_that_does_not_read_the_payload_keeps_it_packed():
    s = pickle.loads(pickle.dumps(_sample()))  # the queue's copy
    assert type(s.__dict__["_completion_ids"]) is bytes and type(s.__dict__["_behaviour_logprobs"]) is bytes
    assert s.num_tokens == 4 and s.reward == 1.0  # what the queue reads
    assert type(s.__dict__["_completion_ids"]) is bytes  # still packed
    again = pickle.loads(pickle.dumps(s))  # on to the driver
    assert again.completion_ids == [5, 0, 2**31 - 1, 17]
    assert type(again.__dict__["_completion_ids"]) is list  # decoded once, on first read


def test_a_changed_list_is_what_travels():
    s = pickle.loads(pickle.dumps(_sample()))
    s.completion_ids.append(9)  # decoded list, changed in place
    s.behaviour_logprobs = [-2.0] * 5
    t = pickle.loads(pickle.dumps(s))
    assert t.completion_ids == [5, 0, 2**31 - 1, 17, 9] and t.behaviour_logprobs == [-2.0] * 5
    assert copy.deepcopy(t) == t


def test_empty_and_keyword_construction():
    s = Sample(prompt_id="e", completion_ids=[], behaviour_logprobs=[], reward=0.0, version=0)
    t = pickle.loads(pickle.dumps(s))
    assert t == s and t.num_tokens == 0 and t.completion_ids == []
    with pytest.raises(TypeError, match="completion_ids"):
        Sample("p")  # no defaults for the packed fields


def test_a_token_id_outside_int32_is_named():
    with pytest.raises(TypeError, match=r"Sample.completion_ids of prompt p7: expected a sequence of int32 token ids"):
        pickle.dumps(_sample(completion_ids=[1, 2**40]))
    with pytest.raises(TypeError, match=r"Sample.behaviour_logprobs of prompt p7: expected a sequence of floats"):
        pickle.dumps(_sample(behaviour_logprobs=[None]))


def test_the_wire_form_carries_every_field():
    import dataclasses

    s = _sample()
    fn, args = s.__reduce__()
    assert len(args) == len(dataclasses.fields(Sample))  # a new field must be added to __reduce__ and the unpickler
    t = fn(*args)
    assert dataclasses.asdict(t) == dataclasses.asdict(s)


def test_a_group_round_trips_with_its_samples_still_packed():
    from ada_ray.algo.types import Group

    g = Group("p7", [1, 2, 3], [_sample(), _sample(reward=0.0)], [0.5, -0.5], cohort=4, pool_size=6, pool_positives=3,
              rounds=2, exit_fired=True, round0_rewards=[1.0, 0.0], difficulty="hard", dropped=True)
    t = pickle.loads(pickle.dumps(g))
    assert t == g and t.zero_signal is False and t.difficulty == "hard" and t.dropped
    q = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(g))))  # sampler -> queue -> driver, never read between
    assert type(q.samples[0].__dict__["_completion_ids"]) is bytes and q == g

