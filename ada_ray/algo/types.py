"""The records that flow through the system: one scored Sample, one work item's samples as columns
(SampleBlock: what a sampler reports when the payloads are off the control plane), one training Group
(groups cross processes as columns: groups_to_wire), one leased WorkItem and a lease answer's items as
columns (WorkBatch), and the Signal values that stand in for a record where there is none."""

from __future__ import annotations

import bisect
from array import array
from itertools import accumulate
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Optional


class Signal(StrEnum):
    """Control values passed between the scheduler, the PromptQueue, the samplers and the driver.

    A StrEnum: each member equals (and prints as) the string that was passed before it existed
    (``Signal.END == "end"``), so callers comparing with the old strings keep working; TIMEOUT
    replaces the bare None that `wait_cohort` returned."""

    READY = "ready"  # cohort_status: the cohort is complete and can be taken
    PENDING = "pending"  # cohort_status: the cohort is still sampling
    END = "end"  # cohort_status / wait_cohort: this cohort will never exist (data or steps ran out, queue stopped)
    STOP = "stop"  # lease: the queue has stopped; the sampler stops leasing
    TIMEOUT = "timeout"  # wait_cohort: the cohort was not ready within the timeout


class PackedList:
    """A list-of-numbers field that crosses process boundaries as one packed bytes object.

    Pickling a list builds or parses one Python object per element: for a sample's token ids and
    log-probs that was most of the PromptQueue's CPU (it passes samples from the samplers to the
    driver without reading them). Here a field holds either its list or the packed bytes it arrived
    as; the list is decoded on first read (C speed, `array`), and bytes that were never read are
    pickled again as they are, so a hop that does not read the field costs O(1) per sample."""

    def __init__(self, typecode: str, itemsize: int):
        if array(typecode).itemsize != itemsize:
            raise RuntimeError(f"array typecode {typecode!r} is not {itemsize} bytes on this platform")
        self.typecode = typecode
        self.itemsize = itemsize

    def __set_name__(self, owner, name: str) -> None:
        self.name = name
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:  # the dataclass asks for a default: there is none
            raise AttributeError(self.name)
        value = obj.__dict__[self.slot]
        if value is None:
            raise PayloadNotFetched(f"{type(obj).__name__}.{self.name} of prompt {getattr(obj, 'prompt_id', '?')} is "
                                    f"off the control plane (payload batch {obj.payload[0].key}, row {obj.payload[1]}): "
                                    "fetch it first (algo/payloads.py)")
        if type(value) is bytes:
            decoded = array(self.typecode)
            decoded.frombytes(value)
            value = obj.__dict__[self.slot] = decoded.tolist()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value

    def packed(self, obj) -> Optional[bytes]:
        value = obj.__dict__[self.slot]
        if value is None or type(value) is bytes:  # None: the payload is elsewhere (Sample.payload)
            return value
        try:
            return array(self.typecode, value).tobytes()
        except (OverflowError, TypeError) as e:
            kind = "int32 token ids" if self.typecode == "i" else "floats"
            raise TypeError(f"{type(obj).__name__}.{self.name} of prompt {getattr(obj, 'prompt_id', '?')}: expected "
                            f"a sequence of {kind}, got {str(value)[:80]} ({e})") from e

    def length(self, obj) -> int:
        value = obj.__dict__[self.slot]
        if value is None:
            return obj.payload[2]
        return len(value) // self.itemsize if type(value) is bytes else len(value)


class PayloadNotFetched(RuntimeError):
    """A sample's token ids or log-probs were read where only its metadata is (see Sample.payload)."""


@dataclass(frozen=True)
class PayloadBatch:
    """One report's payloads (token ids, log-probs, texts of every sample a sampler reported in one call),
    kept off the control plane: `handle` is the transport's opaque reference (with Ray, the ObjectRef
    inside a list, so Ray passes it through every actor call without dereferencing it), `owner` the
    sampler that made it (the batch dies with it), `key` a name unique in the run."""

    key: str
    owner: str
    handle: Any

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, PayloadBatch) and other.key == self.key


_COMPLETION_IDS = PackedList("i", 4)
_BEHAVIOUR_LOGPROBS = PackedList("d", 8)


@dataclass
class Sample:
    """One generated response. Every sample carries its prompt id, the policy version that
    produced it, the behaviour log-probs of its tokens, and its reward (ARCHITECTURE invariant 2).

    The token ids (int32) and log-probs (float64, exact) are `PackedList`s: a Sample pickles them as
    bytes, and a process that never reads them never unpacks them. Off the control plane (the default
    transport) they are not here at all: `payload` = (PayloadBatch, row, number of tokens) names where
    they are, completion_ids / behaviour_logprobs are None and reading them raises PayloadNotFetched until
    `fill_payload` puts them back (algo/payloads.py: the learner's fetch, a checkpoint's)."""

    prompt_id: str
    completion_ids: list[int] = _COMPLETION_IDS  # type: ignore[assignment]
    behaviour_logprobs: list[float] = _BEHAVIOUR_LOGPROBS  # type: ignore[assignment]
    reward: float
    version: int
    round: int = 0
    text: str = ""
    finish_reason: str = "stop"
    reward_error: bool = False  # the verifier raised or timed out (scored 0)
    payload: Optional[tuple] = None  # (PayloadBatch, row, tokens) while the token ids etc. are elsewhere

    @property
    def num_tokens(self) -> int:
        """len(completion_ids), without unpacking them."""
        return _COMPLETION_IDS.length(self)

    def __repr__(self) -> str:
        where = f"payload={self.payload[0].key}[{self.payload[1]}]" if self.remote else f"tokens={self.num_tokens}"
        return (f"Sample(prompt_id={self.prompt_id!r}, reward={self.reward}, version={self.version}, round={self.round}, "
                f"{where})")

    @property
    def remote(self) -> bool:
        """True while the token ids, log-probs and text are in a PayloadBatch, not here."""
        return self.__dict__["_completion_ids"] is None

    def __eq__(self, other) -> bool:
        """Field by field, token ids and log-probs as packed (so a sample whose payload is elsewhere compares
        by where it is, without reading it)."""
        if not isinstance(other, Sample):
            return NotImplemented
        return self.__reduce__()[1] == other.__reduce__()[1]

    def fill_payload(self, completion_ids, behaviour_logprobs, text: str) -> None:
        """Put the fetched payload back (packed bytes or lists); the sample is whole again."""
        self.__dict__.update(_completion_ids=completion_ids, _behaviour_logprobs=behaviour_logprobs, text=text,
                             payload=None)

    def __reduce__(self):
        return _sample_from_wire, (self.prompt_id, _COMPLETION_IDS.packed(self), _BEHAVIOUR_LOGPROBS.packed(self),
                                   self.reward, self.version, self.round, self.text, self.finish_reason, self.reward_error,
                                   self.payload)


def _sample_from_wire(prompt_id, completion_ids, behaviour_logprobs, reward, version, round_, text, finish_reason,
                      reward_error, payload=None) -> Sample:
    """Unpickle without running __init__ (a third of the cost; the PromptQueue unpickles every sample)."""
    s = object.__new__(Sample)
    s.__dict__ = {"prompt_id": prompt_id, "_completion_ids": completion_ids, "_behaviour_logprobs": behaviour_logprobs,
                  "reward": reward, "version": version, "round": round_, "text": text, "finish_reason": finish_reason,
                  "reward_error": reward_error, "payload": payload}
    return s


class SampleBlock(Sequence):
    """The samples of one work item as columns: what a sampler reports for an item when the payloads are
    off the control plane (sampler.payload_transport = object_store). One object an item, not one a
    sample: rewards, numbers of tokens and (when any differs from the default) finish reasons and
    reward-error flags are plain lists; sample i's payload is row `first_row + i` of `batch`. It crosses
    processes as those lists (no per-sample object is pickled or unpickled), and the scheduler reads
    `rewards` without building a Sample: sample i is built only when it is read (`block[i]`; iterating
    builds them all), once, and the block keeps it (so a payload filled into it, or the round set on it,
    stays)."""

    __slots__ = ("prompt_id", "version", "round", "rewards", "tokens", "batch", "first_row", "finish", "errors",
                 "_samples")

    def __init__(self, prompt_id: str, version: int, rewards: list[float], tokens: list[int], batch: "PayloadBatch",
                 first_row: int, finish: Optional[list[str]] = None, errors: Optional[list[bool]] = None,
                 round_: int = 0):
        if len(tokens) != len(rewards) or any(x is not None and len(x) != len(rewards) for x in (finish, errors)):
            raise ValueError(f"SampleBlock of prompt {prompt_id}: {len(rewards)} rewards but {len(tokens)} token "
                             f"counts, {len(finish or rewards)} finish reasons, {len(errors or rewards)} error flags")
        self.prompt_id, self.version, self.round = prompt_id, version, round_
        self.rewards, self.tokens, self.batch, self.first_row = rewards, tokens, batch, first_row
        self.finish, self.errors = finish, errors
        self._samples: Optional[list[Sample]] = None

    def __len__(self) -> int:
        return len(self.rewards)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._one(j) for j in range(len(self.rewards))[i]]
        return self._one(range(len(self.rewards))[i])

    def __iter__(self):
        return iter(self.samples())

    @property
    def materialized(self) -> bool:
        """True once a Sample of this block has been built."""
        return self._samples is not None

    def _one(self, i: int) -> Sample:
        built = self._samples
        if built is None:
            built = self._samples = [None] * len(self.rewards)
        s = built[i]
        if s is None:
            s = built[i] = _sample_from_wire(*self.wire(i))
        return s

    def wire(self, i: int) -> tuple:
        """Sample i as it pickles (its `__reduce__` arguments), without building it when it was not read."""
        if self._samples is not None and self._samples[i] is not None:
            return self._samples[i].__reduce__()[1]
        return (self.prompt_id, None, None, self.rewards[i], self.version, self.round, "",
                self.finish[i] if self.finish else "stop", self.errors[i] if self.errors else False,
                (self.batch, self.first_row + i, self.tokens[i]))

    def samples(self) -> list[Sample]:
        """This block's Samples (each built on its first read, the same object after)."""
        return [self._one(i) for i in range(len(self.rewards))]

    def set_round(self, round_: int) -> None:
        self.round = round_
        for s in self._samples or ():
            if s is not None:
                s.round = round_

    def _key(self) -> tuple:
        return (self.prompt_id, self.version, self.round, self.rewards, self.tokens, self.batch, self.first_row,
                self.finish or ["stop"] * len(self), self.errors or [False] * len(self))

    def __eq__(self, other) -> bool:
        if isinstance(other, SampleBlock) and not (self.materialized or other.materialized):
            return self._key() == other._key()
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # mutable, compared by content

    def __repr__(self) -> str:
        return (f"SampleBlock(prompt_id={self.prompt_id!r}, version={self.version}, round={self.round}, "
                f"rewards={self.rewards}, payload={self.batch.key}[{self.first_row}:{self.first_row + len(self)}])")

    def __reduce__(self):
        if self._samples is not None:  # built (and maybe filled or changed) here: they travel as they are
            return list, (self.samples(),)
        return _block_from_wire, self.fields()

    def fields(self) -> tuple:
        """The columns it is rebuilt from (`_block_from_wire`'s arguments)."""
        return (self.prompt_id, self.version, self.round, self.rewards, self.tokens, self.batch, self.first_row,
                self.finish, self.errors)


def _block_from_wire(prompt_id, version, round_, rewards, tokens, batch, first_row, finish, errors) -> SampleBlock:
    b = object.__new__(SampleBlock)
    b.prompt_id, b.version, b.round, b.rewards, b.tokens = prompt_id, version, round_, rewards, tokens
    b.batch, b.first_row, b.finish, b.errors, b._samples = batch, first_row, finish, errors, None
    return b


@dataclass
class Group:
    """A prompt's training group: the kept samples and their advantages, plus what the pool saw."""

    prompt_id: str
    prompt_ids: list[int]
    samples: Sequence[Sample]  # a list, or in the queue a view of the pool that builds a sample only where read
    advantages: list[float]
    cohort: int
    pool_size: int  # every sample drawn for this prompt in this step
    pool_positives: int
    rounds: int
    exit_fired: bool  # False: the round cap was hit before the exit rule fired
    round0_rewards: list[float] = field(default_factory=list)
    difficulty: str = ""
    dropped: bool = False  # DAPO: filtered out (not trained)

    @property
    def zero_signal(self) -> bool:
        return all(abs(a) < 1e-12 for a in self.advantages)

    def __reduce__(self):
        """Pickled as columns (`groups_to_wire`), as a cohort's groups are."""
        return _one_group_from_wire, (groups_to_wire([self]),)


@dataclass(frozen=True)
class Prompt:
    """One dataset prompt, tokenized. The id is stable across epochs and runs (hash of content)."""

    prompt_id: str
    text: str
    token_ids: tuple[int, ...]
    answer: str
    difficulty: str = ""
    prior_pass_rate: Optional[float] = None  # offline pass rate (prepare-data), seeds the difficulty memory


@dataclass(frozen=True)
class WorkItem:
    """What a sampler leases: k samples of one prompt for one round, with a deterministic seed."""

    item_id: int
    prompt_id: str
    token_ids: tuple[int, ...]
    answer: str
    num_samples: int
    cohort: int
    round: int
    seed: int
    version: int  # the queue's policy version when the item was leased

    @classmethod
    def make(cls, item_id: int, prompt_id: str, token_ids: tuple, answer: str, num_samples: int, cohort: int,
             round: int, seed: int, version: int) -> "WorkItem":
        """WorkItem(...) without the frozen __init__'s one object.__setattr__ a field (half the cost; the
        queue makes one for every round it starts)."""
        new = object.__new__(cls)
        new.__dict__.update(item_id=item_id, prompt_id=prompt_id, token_ids=token_ids, answer=answer,
                            num_samples=num_samples, cohort=cohort, round=round, seed=seed, version=version)
        return new

    def but(self, **changes) -> "WorkItem":
        """A copy with `changes`: what dataclasses.replace gives, without running the frozen __init__
        (one object.__setattr__ a field: ~4x dearer; the queue copies every item it leases)."""
        new = object.__new__(WorkItem)
        new.__dict__.update(self.__dict__, **changes)
        return new


_WORK_FIELDS = tuple(WorkItem.__dataclass_fields__)


class WorkBatch(Sequence):
    """The work items of one lease answer as columns: one list a WorkItem field. It crosses processes as
    those lists (a relay passes it on without reading it), so the queue pickles no object an item (with
    Ray, each object a Python hook call); an item is built on its first read, once."""

    __slots__ = ("columns", "_items")

    def __init__(self, columns: list[list]):
        self.columns = columns
        self._items: Optional[list[WorkItem]] = None

    @classmethod
    def of(cls, items: Sequence[WorkItem]) -> "WorkBatch":
        dicts = [it.__dict__ for it in items]
        return cls([[d[f] for d in dicts] for f in _WORK_FIELDS])

    def items(self) -> list[WorkItem]:
        if self._items is None:
            self._items = [WorkItem.make(*row) for row in zip(*self.columns)]
        return self._items

    def __len__(self) -> int:
        return len(self.columns[0])

    def __getitem__(self, i):
        return self.items()[i]

    def __iter__(self):
        return iter(self.items())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None

    def __add__(self, other) -> list[WorkItem]:
        return list(self) + list(other)

    def __radd__(self, other) -> list[WorkItem]:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return f"WorkBatch({len(self)} items)"

    def __reduce__(self):
        return WorkBatch, (self.columns,)


_GROUP_FIELDS = tuple(f for f in Group.__dataclass_fields__ if f != "samples")


def groups_to_wire(groups: Sequence[Group]) -> tuple:
    """Groups as columns: one list a Group field across the groups, and each group's kept samples as the
    rounds they were reported in (a pool that is all SampleBlocks not read in the queue: each block's
    columns, and the kept samples' pool indices; `PoolView.to_wire`) or else as each kept sample's wire
    tuple. Pickled so, a cohort leaves the PromptQueue as lists and tuples - no object a group or a
    sample, nothing for Ray's Python pickling hook - and the samples are built where it is unpickled."""
    dicts = [g.__dict__ for g in groups]
    columns = [[d[f] for d in dicts] for f in _GROUP_FIELDS]
    samples = [d["samples"].to_wire() if hasattr(d["samples"], "to_wire") else [s.__reduce__()[1] for s in d["samples"]]
               for d in dicts]
    return columns, samples


def groups_from_wire(columns: list, samples: list) -> list[Group]:
    """The groups `groups_to_wire` took apart, each holding its Samples (built here)."""
    out = []
    for values, kept in zip(zip(*columns), samples):
        g = object.__new__(Group)
        g.__dict__ = dict(zip(_GROUP_FIELDS, values))
        g.samples = _kept_from_pool(*kept) if type(kept) is tuple else [_sample_from_wire(*w) for w in kept]
        out.append(g)
    return out


def _kept_from_pool(rounds: list, indices: list) -> list[Sample]:
    """Pool samples `indices` of a pool reported as `rounds` (each a SampleBlock's fields)."""
    blocks = [_block_from_wire(*r) for r in rounds]
    starts = list(accumulate((len(b) for b in blocks[:-1]), initial=0))
    out = []
    for j in indices:
        r = bisect.bisect_right(starts, j) - 1
        out.append(blocks[r][j - starts[r]])
    return out


def _one_group_from_wire(wire: tuple) -> Group:
    return groups_from_wire(*wire)[0]
