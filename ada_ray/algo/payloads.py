"""Sample payloads off the control plane: what a sampler's report batch holds, and putting it back.

The PromptQueue schedules on metadata (prompt id, reward, version, round, number of tokens); the token
ids, behaviour log-probs and texts of every sample a sampler reports in one call travel as one
`PayloadBatch` through a `PayloadStore` (with Ray: one object in the object store, owned by the sampler),
and only the consumer that needs them - the learner, or a checkpoint - fetches them, every batch it
needs in one call. A batch whose owner died is *lost*: the store says so (`LostPayloads`) and the
scheduler samples those prompts again (`WorkScheduler.lose_owners`); nothing is trained from it.

The owner keeps its batches (`OwnedBatches`) and the control plane carries only their names: the batch's
key and the name its owner answers to (no reference a batch crosses the queue, so the queue takes part in
no reference counting). An owner drops a batch once admission control says no cohort can train it any
more (`payload_expired`: the weights moved more than max_staleness + 1 versions past its newest sample).

Pure: numpy, no Ray (the Ray store is actors/ray_payloads.py; `LocalPayloadStore` is the in-process one
the fake-backed tests and benches use).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Iterable, Optional, Protocol, Sequence

import numpy as np

from ada_ray.algo.types import PayloadBatch, Sample, SampleBlock


class LostPayloads(RuntimeError):
    """Payload batches that can no longer be fetched (their owner died or the object was lost)."""

    def __init__(self, batches: Sequence[PayloadBatch], why: str = ""):
        self.batches = list(batches)
        self.owners = sorted({b.owner for b in self.batches})
        super().__init__(f"{len(self.batches)} payload batch(es) lost (owners {self.owners}){': ' + why if why else ''}")


class CohortPayloadsLost(RuntimeError):
    """A cohort could not be trained: payloads of these owners were gone when the learners fetched them."""

    def __init__(self, owners: Sequence[str]):
        self.owners = sorted(set(owners))
        super().__init__(f"payloads of sampler(s) {self.owners} lost before the learners fetched them")


class PayloadStore(Protocol):
    """Where report batches live while their samples are scheduled and trained."""

    def put(self, arrays: dict, owner: str, version: int = 0) -> PayloadBatch:
        """Store one report batch's arrays (`pack`), owned by `owner`; `version`: the newest policy version
        its samples were started under."""

    def fetch(self, batches: Sequence[PayloadBatch], timeout_s: float) -> dict[str, dict]:
        """key -> arrays for every batch; raises LostPayloads naming every batch that is gone."""

    def expire(self, version: int, max_staleness: int) -> int:
        """The owner's weights are at `version`: drop the batches no cohort can train any more; how many."""


PAYLOAD_KEEP_MARGIN = 1  # versions an owner keeps a batch beyond the last one admission control could train it at


def payload_expired(batch_version: int, version: int, max_staleness: int) -> bool:
    """Whether a batch whose newest sample was started under `batch_version` can be dropped once the
    weights are at `version`. Weights at `version` mean cohorts < version are trained; a cohort c trains
    only samples started under versions >= c - max_staleness (admission control), so every cohort still
    to come needs versions >= version - max_staleness. One version more is kept as a margin (an owner
    may learn of new weights before a slow reader fetched). Example, max_staleness = 2: a batch of
    version 3 is kept at weights 3..6 and dropped at 7."""
    return batch_version < version - max_staleness - PAYLOAD_KEEP_MARGIN


class OwnedBatches:
    """The batches an owner keeps while the control plane names them: key -> (handle, newest version of
    its samples). Handles are the store's (with Ray, the ObjectRef, which only the owner holds). Safe to
    use from several threads (a sampler puts from its report thread, expires from its loop thread and
    answers readers from its actor threads)."""

    def __init__(self):
        self._held: dict[str, tuple[Any, int]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, handle: Any, version: int) -> None:
        with self._lock:
            self._held[key] = (handle, version)

    def handles(self, keys: Sequence[str]) -> list:
        """The handle of each key, None for one this owner does not hold (expired, or never its)."""
        with self._lock:
            return [h[0] if (h := self._held.get(k)) is not None else None for k in keys]

    def expire(self, version: int, max_staleness: int) -> int:
        with self._lock:
            gone = [k for k, (_, v) in self._held.items() if payload_expired(v, version, max_staleness)]
            for k in gone:
                del self._held[k]
        return len(gone)

    def __len__(self) -> int:
        return len(self._held)


def pack(token_ids: Sequence[Sequence[int]], logprobs: Sequence[Sequence[float]], texts: Sequence[str]) -> dict:
    """One report batch as flat arrays: ids (int32) and log-probs (float64, exact) of every sample end to
    end, `offsets` (n + 1) where each sample's tokens start, and the texts."""
    lengths = np.fromiter((len(t) for t in token_ids), dtype=np.int64, count=len(token_ids))
    if any(len(lp) not in (0, n) for lp, n in zip(logprobs, lengths)):
        bad = next(i for i, (lp, n) in enumerate(zip(logprobs, lengths)) if len(lp) not in (0, n))
        raise ValueError(f"payload row {bad}: {len(logprobs[bad])} log-probs for {lengths[bad]} tokens")
    offsets = np.zeros(len(token_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int32, count=int(offsets[-1]))
    has_lp = np.array([len(lp) == n for lp, n in zip(logprobs, lengths)], dtype=bool)
    lps = np.zeros(int(offsets[-1]), dtype=np.float64)
    for i in np.flatnonzero(has_lp):
        lps[offsets[i]:offsets[i + 1]] = logprobs[i]
    return {"ids": ids, "logprobs": lps, "has_logprobs": has_lp, "offsets": offsets, "texts": list(texts)}


def row_arrays(arrays: dict, i: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Sample i of a batch as views: (int32 ids, float64 log-probs - empty when it had none, text)."""
    a, b = int(arrays["offsets"][i]), int(arrays["offsets"][i + 1])
    lps = arrays["logprobs"][a:b] if arrays["has_logprobs"][i] else arrays["logprobs"][:0]
    return arrays["ids"][a:b], lps, arrays["texts"][i]


def row(arrays: dict, i: int) -> tuple[bytes, bytes, str]:
    """Sample i of a batch as a Sample's packed fields: (int32 ids, float64 log-probs, text)."""
    ids, lps, text = row_arrays(arrays, i)
    return ids.tobytes(), lps.tobytes(), text


def distinct_batches(batches: Iterable[PayloadBatch]) -> list[PayloadBatch]:
    """Each batch once (by key), in first-seen order."""
    seen: dict[str, PayloadBatch] = {}
    for b in batches:
        seen.setdefault(b.key, b)
    return list(seen.values())


def remote_batches(samples: Iterable[Sample]) -> list[PayloadBatch]:
    """The distinct batches these samples' payloads are in (in first-seen order)."""
    return distinct_batches(s.payload[0] for s in samples if s.payload is not None)


def fill(samples: Iterable[Sample], fetched: dict[str, dict]) -> int:
    """Put each remote sample's payload back from the fetched batches; the number filled."""
    n = 0
    for s in samples:
        if s.payload is not None:
            batch, i, _ = s.payload
            s.fill_payload(*row(fetched[batch.key], i))
            n += 1
    return n


def fetch_into(store: PayloadStore, samples: Sequence[Sample], timeout_s: float) -> int:
    """Fetch every batch these samples need in one store call and fill them (LostPayloads if any is gone:
    then no sample is filled)."""
    batches = remote_batches(samples)
    if not batches:
        return 0
    return fill(samples, store.fetch(batches, timeout_s))


class LocalPayloadStore:
    """An in-process PayloadStore with the Ray store's semantics: each owner keeps its batches until they
    expire (`expire`, called as the owners' weights advance) and they die with it (`kill`). A batch's
    handle is its owner's name, as with Ray. Used by the fake-backed tests and benches; `live` counts the
    batches held."""

    def __init__(self):
        self._owned: dict[str, OwnedBatches] = {}
        self._dead: set[str] = set()
        self._ids = itertools.count()

    def put(self, arrays: dict, owner: str, version: int = 0) -> PayloadBatch:
        key = f"{owner}#{next(self._ids)}"
        self._owned.setdefault(owner, OwnedBatches()).add(key, arrays, version)
        return PayloadBatch(key, owner, owner)

    def fetch(self, batches: Sequence[PayloadBatch], timeout_s: float) -> dict[str, dict]:
        got = {b.key: (self._owned[b.owner].handles([b.key])[0] if b.owner in self._owned else None)
               for b in batches}
        lost = [b for b in batches if got[b.key] is None]
        if lost:
            raise LostPayloads(lost, "owner died" if any(b.owner in self._dead for b in lost) else "expired")
        return got

    def expire(self, version: int, max_staleness: int) -> int:
        return sum(o.expire(version, max_staleness) for o in self._owned.values())

    def kill(self, owner: str) -> int:
        self._dead.add(owner)
        return len(self._owned.pop(owner, ()))

    @property
    def live(self) -> int:
        return sum(len(o) for o in self._owned.values())


def remote_report(prompt_id: str, version: int, rewards: list[float], tokens: int, batch: PayloadBatch, first_row: int,
                  as_block: bool = True) -> Sequence[Sample]:
    """One item's report with its payloads at rows first_row.. of `batch`, every sample `tokens` long: one
    SampleBlock (what a sampler reports) or, `as_block=False`, one Sample a sample (the report before
    SampleBlock; the benches' before/after)."""
    if as_block:
        return SampleBlock(prompt_id, version, rewards, [tokens] * len(rewards), batch, first_row)
    return [remote_sample(prompt_id, r, version, batch, first_row + j, tokens) for j, r in enumerate(rewards)]


def remote_sample(prompt_id: str, reward: float, version: int, batch: PayloadBatch, index: int, tokens: int,
                  round_: int = 0, finish_reason: str = "stop", reward_error: bool = False,
                  text: Optional[str] = None) -> Sample:
    """A Sample whose payload is row `index` of `batch` (what a sampler reports to the queue)."""
    return Sample(prompt_id, None, None, reward, version, round_, text or "", finish_reason, reward_error,
                  (batch, index, tokens))


