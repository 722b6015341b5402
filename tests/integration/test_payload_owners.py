"""Payload batches kept by their owners (actors/ray_payloads.py), on a real Ray cluster: what crosses the
control plane is the batch's key and its owner's name (no ObjectRef); a reader gets the arrays from the
owner's references; a batch the owner expired, an owner killed, an owner never there: LostPayloads
naming exactly those batches, the others still fetched."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import ray

from ada_ray.actors.ray_payloads import OWNERS_NAMESPACE, RayPayloadStore, owner_actor_name
from ada_ray.algo.payloads import LostPayloads, pack
from ada_ray.algo.types import PayloadBatch

pytestmark = pytest.mark.slow


@ray.remote(num_cpus=0)
class Owner:
    """Stands for a sampler: owns its batches and answers readers."""

    def __init__(self, name: str):
        self.store = RayPayloadStore(name)

    def put(self, tokens: list, version: int) -> PayloadBatch:
        return self.store.put(pack([tokens], [[-0.5] * len(tokens)], ["t"]), "s", version)

    def payload_refs(self, keys: list) -> list:
        return self.store.refs(keys)

    def expire(self, version: int, max_staleness: int) -> int:
        return self.store.expire(version, max_staleness)


def _owner():
    name = owner_actor_name("s")
    return Owner.options(name=name, namespace=OWNERS_NAMESPACE).remote(name)


def test_a_reader_fetches_from_the_owner_and_only_names_cross(ray_cluster):
    a, b = _owner(), _owner()
    try:
        x = ray.get(a.put.remote([1, 2, 3], 0), timeout=60)
        y = ray.get(b.put.remote([4], 1), timeout=60)
        assert isinstance(x.handle, str) and isinstance(pickle.loads(pickle.dumps(x)), PayloadBatch)
        got = RayPayloadStore().fetch([x, y], 60)
        assert got[x.key]["ids"].tolist() == [1, 2, 3] and got[y.key]["ids"].tolist() == [4]
        assert np.allclose(got[x.key]["logprobs"], -0.5)
    finally:
        ray.kill(a)
        ray.kill(b)


def test_expired_killed_and_unknown_owners_lose_exactly_their_batches(ray_cluster):
    a, b = _owner(), _owner()
    try:
        old = ray.get(a.put.remote([1], 1), timeout=60)
        new = ray.get(a.put.remote([2], 4), timeout=60)
        gone = ray.get(b.put.remote([3], 4), timeout=60)
        assert ray.get(a.expire.remote(5, 2), timeout=60) == 1  # version 1 < 5 - 2 - 1
        with pytest.raises(LostPayloads, match="expired") as e:
            RayPayloadStore().fetch([old, new], 60)
        assert e.value.batches == [old]
        assert RayPayloadStore().fetch([new], 60)[new.key]["ids"].tolist() == [2]
        ray.kill(b)
        stranger = PayloadBatch("x#0", "x", owner_actor_name("x"))  # never created
        with pytest.raises(LostPayloads) as e:
            RayPayloadStore().fetch([new, gone, stranger], 60)
        assert {bb.key for bb in e.value.batches} == {gone.key, stranger.key}
    finally:
        ray.kill(a)
        ray.kill(b)


def test_a_store_with_no_owner_name_refuses_to_put():
    with pytest.raises(RuntimeError, match="needs the name of the actor"):
        RayPayloadStore().put(pack([[1]], [[0.0]], [""]), "s0")
