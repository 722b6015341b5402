"""The PayloadStore on Ray: one object in the object store per report batch.

The sampler that `put`s a batch owns it (Ray's ownership: the object lives while any process holds a
reference and dies with its owner). The handle is the ObjectRef inside a one-element list, so Ray hands
it through the queue, the driver and the learner as a reference (a top-level ObjectRef argument would be
fetched before each call). `fetch` gets every batch in one `ray.get`; when that fails it asks batch by batch
which are gone and raises LostPayloads naming them (OwnerDiedError, ObjectLostError and the like: the
scheduler samples their prompts again). numpy arrays come back zero-copy (read-only views of the store).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Sequence

import ray
from ray.exceptions import GetTimeoutError, RayError

from ada_ray.algo.payloads import LostPayloads
from ada_ray.algo.types import PayloadBatch


class RayPayloadStore:
    def __init__(self):
        self._prefix = uuid.uuid4().hex[:8]
        self._ids = itertools.count()

    def put(self, arrays: dict, owner: str) -> PayloadBatch:
        return PayloadBatch(f"{owner}#{self._prefix}.{next(self._ids)}", owner, [ray.put(arrays)])

    def fetch(self, batches: Sequence[PayloadBatch], timeout_s: float) -> dict[str, dict]:
        refs = [b.handle[0] for b in batches]
        try:
            return {b.key: v for b, v in zip(batches, ray.get(refs, timeout=timeout_s))}
        except GetTimeoutError:
            raise
        except RayError:
            pass
        out, lost, why = {}, [], ""
        for b, ref in zip(batches, refs):
            try:
                out[b.key] = ray.get(ref, timeout=timeout_s)
            except GetTimeoutError:
                raise
            except RayError as e:
                lost.append(b)
                why = why or type(e).__name__
        if lost:
            raise LostPayloads(lost, why)
        return out
