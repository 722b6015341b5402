"""The PayloadStore on Ray: one object in the object store per report batch, kept by the sampler that made it.

The sampler `put`s a batch and keeps its ObjectRef itself (`OwnedBatches`; Ray's ownership: the object
dies with its owner); what crosses the queue, the driver and the learner is only the batch's key and the
name of the actor that owns it (`PayloadBatch.handle`, a string). No ObjectRef rides through the queue:
an argument holding one makes Ray count the receiver as a borrower (extra RPCs between the owner and
every process the reference passes through), which cost the queue about as much CPU as the call itself
(BENCHMARKS.md, "Payload references stay with their owners"). A reader (`fetch`: the learner, a
checkpoint) asks each owner for the references of the keys it needs (`payload_refs`, one call an owner,
all owners at once), then gets every object in one `ray.get`. An owner that is gone, a key it no longer
holds, or an object that cannot be read: `LostPayloads` naming those batches (the scheduler samples their
prompts again). The owner drops a batch once no cohort can train it (`expire`, algo/payloads.py). numpy
arrays come back zero-copy (read-only views of the store).

Owners are named actors in `OWNERS_NAMESPACE` (`owner_actor_name`), so a reader finds one by the name
alone; the samplers' name is given by the Runtime, the bench's simulated samplers pick their own.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Optional, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayError

from ada_ray.algo.payloads import LostPayloads, OwnedBatches
from ada_ray.algo.types import PayloadBatch

OWNERS_NAMESPACE = "ada_ray_payload_owners"

_owner_handles: dict[str, object] = {}  # actor name -> handle, in this process


def owner_actor_name(sampler_id: str) -> str:
    """A name unique on the cluster for the actor that owns `sampler_id`'s payload batches."""
    return f"{sampler_id}@{uuid.uuid4().hex[:12]}"


def _owner(name: str):
    h = _owner_handles.get(name)
    if h is None:
        h = _owner_handles[name] = ray.get_actor(name, namespace=OWNERS_NAMESPACE)
    return h


class RayPayloadStore:
    """`owner_name`: the name of the actor this store's batches are served by (its `payload_refs` method
    answers `refs`); a store that only fetches (learner, queue) needs none."""

    def __init__(self, owner_name: Optional[str] = None):
        self.owner_name = owner_name
        self.owned = OwnedBatches()
        self._prefix = uuid.uuid4().hex[:8]
        self._ids = itertools.count()

    def put(self, arrays: dict, owner: str, version: int = 0) -> PayloadBatch:
        if self.owner_name is None:
            raise RuntimeError(f"payload store of {owner}: put needs the name of the actor that serves its batches")
        key = f"{owner}#{self._prefix}.{next(self._ids)}"
        self.owned.add(key, ray.put(arrays), version)
        return PayloadBatch(key, owner, self.owner_name)

    def refs(self, keys: Sequence[str]) -> list:
        """The owner's answer to `payload_refs`: each key's ObjectRef inside a one-element list (so Ray
        passes it back as a reference), None for a key it does not hold."""
        return [None if r is None else [r] for r in self.owned.handles(keys)]

    def expire(self, version: int, max_staleness: int) -> int:
        return self.owned.expire(version, max_staleness)

    def _refs_by_owner(self, batches: Sequence[PayloadBatch], timeout_s: float) -> tuple[dict, list, str]:
        """key -> ObjectRef for every batch its owner still holds; the batches that are gone, and why."""
        by_owner: dict[str, list[PayloadBatch]] = {}
        for b in batches:
            by_owner.setdefault(b.handle, []).append(b)
        calls, lost, why = {}, [], ""
        for name, group in by_owner.items():
            try:
                calls[name] = _owner(name).payload_refs.remote([b.key for b in group])
            except ValueError:  # no actor by that name: the owner is gone
                lost += group
                why = why or "owner gone"
        refs: dict = {}
        deadline = time.monotonic() + timeout_s
        for name, call in calls.items():
            try:
                answer = ray.get(call, timeout=max(0.0, deadline - time.monotonic()))
            except GetTimeoutError:
                raise
            except RayError as e:  # the owner died
                _owner_handles.pop(name, None)
                lost += by_owner[name]
                why = why or type(e).__name__
                continue
            for b, r in zip(by_owner[name], answer):
                if r is None:
                    lost.append(b)
                    why = why or "expired at its owner"
                else:
                    refs[b.key] = r[0]
        return refs, lost, why

    def fetch(self, batches: Sequence[PayloadBatch], timeout_s: float) -> dict[str, dict]:
        refs, lost, why = self._refs_by_owner(batches, timeout_s)
        if lost:
            raise LostPayloads(lost, why)
        keys = list(refs)
        try:
            return dict(zip(keys, ray.get([refs[k] for k in keys], timeout=timeout_s)))
        except GetTimeoutError:
            raise
        except RayError:
            pass
        out = {}
        for b in batches:
            try:
                out[b.key] = ray.get(refs[b.key], timeout=timeout_s)
            except GetTimeoutError:
                raise
            except RayError as e:
                lost.append(b)
                why = why or type(e).__name__
        if lost:
            raise LostPayloads(lost, why)
        return out
