"""A prompt in flight: `PromptState`, its pool for this step and the pool's positives and negatives.

The pool is kept as the rounds that were reported, in first-collected (scoring) order: each round a
list of Samples or a SampleBlock (one item's samples as columns). The scheduler and the strategies read
the pool through its rewards and counts (`pool_size`, `len(pos)`, `rewards`), which a SampleBlock has
without building a Sample; `pool`, `pos` and `neg` are sequence views that build a sample only where it
is read. Downsampling picks pool indices (the first few of `pos` and `neg`), and the kept group holds a
view of them (`view`): in the queue no Sample is built at all - a group pickles its kept samples from
the columns (`PoolView.to_wire`) and the process that unpickles it gets Samples. Views support len,
indexing, slicing, iteration and == with a list.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Optional

from ada_ray.algo.types import Prompt, Sample, SampleBlock


class PromptState:
    """A prompt in flight: `prompt`, its `cohort`, the pool of this step (see the module docstring),
    rounds done and the first round's rewards. `threshold`: a sample is positive when its reward is above it."""

    __slots__ = ("prompt", "cohort", "threshold", "rounds_done", "round0_rewards", "rewards", "_rounds", "_starts",
                 "_pos", "_neg")

    def __init__(self, prompt: Prompt, cohort: int, threshold: float, pool: Optional[Sequence[Sample]] = None,
                 rounds_done: int = 0, round0_rewards: Optional[list[float]] = None):
        self.prompt, self.cohort, self.threshold = prompt, cohort, threshold
        self.rounds_done = rounds_done
        self.round0_rewards: list[float] = list(round0_rewards or [])
        self.rewards: list[float] = []  # every pool sample's reward, in pool order
        self._rounds: list[Sequence[Sample]] = []  # the reported rounds, as they came
        self._starts: list[int] = []  # pool index of each round's first sample
        self._pos: list[int] = []  # pool indices of the positives, in pool order
        self._neg: list[int] = []
        if pool:
            self._append(pool)

    def _append(self, samples: Sequence[Sample]) -> list[float]:
        rewards = samples.rewards if isinstance(samples, SampleBlock) else [s.reward for s in samples]
        base = len(self.rewards)
        self._starts.append(base)
        self._rounds.append(samples)
        self.rewards.extend(rewards)
        thr, pos, neg = self.threshold, self._pos, self._neg
        for i, r in enumerate(rewards, base):  # the one place a sample is called positive: reward > threshold
            (pos if r > thr else neg).append(i)
        return rewards

    def add_round(self, samples: Sequence[Sample]) -> None:
        rewards = self._append(samples)
        if self.rounds_done == 0:
            self.round0_rewards = list(rewards)
        self.rounds_done += 1

    @property
    def pool_size(self) -> int:
        return len(self.rewards)

    @property
    def num_pos(self) -> int:
        """len(pos), without making the view (the scheduler asks on every report)."""
        return len(self._pos)

    @property
    def num_neg(self) -> int:
        return len(self._neg)

    def _locate(self, i: int) -> tuple[Sequence[Sample], int]:
        """The round holding pool sample i, and its index in that round."""
        r = bisect.bisect_right(self._starts, i) - 1
        return self._rounds[r], i - self._starts[r]

    def sample(self, i: int) -> Sample:
        """Pool sample i (built here if its round is a SampleBlock not read before)."""
        rnd, j = self._locate(i)
        return rnd[j]

    def wire(self, i: int) -> tuple:
        """Pool sample i as it pickles, without building it (Sample.__reduce__'s arguments)."""
        rnd, j = self._locate(i)
        return rnd.wire(j) if isinstance(rnd, SampleBlock) else rnd[j].__reduce__()[1]

    def pool_wire(self, indices: Sequence[int]) -> Optional[tuple[list, list]]:
        """Pool samples `indices` as they pickle when every round is a SampleBlock none of whose samples
        was built here: (each block's columns, the indices) - an object a round, not a tuple a sample
        (types.groups_to_wire). None otherwise (a sample built here may have been filled or changed)."""
        rounds = []
        for rnd in self._rounds:
            if type(rnd) is not SampleBlock or rnd.materialized:
                return None
            rounds.append(rnd.fields())
        return rounds, list(indices)

    def view(self, indices: Sequence[int]) -> "PoolView":
        """Pool samples `indices` (e.g. the kept group), built only where read."""
        return PoolView(self, list(indices))

    @property
    def pool(self) -> "PoolView":
        return PoolView(self, range(len(self.rewards)))

    @property
    def pos(self) -> "PoolView":
        return PoolView(self, self._pos)

    @property
    def neg(self) -> "PoolView":
        return PoolView(self, self._neg)

    def rounds(self) -> list[Sequence[Sample]]:
        """The reported rounds as they came (lists of Samples or SampleBlocks), without building anything."""
        return list(self._rounds)

    def __eq__(self, other) -> bool:
        return (isinstance(other, PromptState) and (self.prompt, self.cohort, self.threshold, self.rounds_done,
                                                     self.round0_rewards) ==
                (other.prompt, other.cohort, other.threshold, other.rounds_done, other.round0_rewards)
                and list(self.pool) == list(other.pool))

    __hash__ = None

    def __repr__(self) -> str:
        return (f"PromptState(prompt_id={self.prompt.prompt_id!r}, cohort={self.cohort}, rounds_done={self.rounds_done}, "
                f"pool={len(self.rewards)} ({len(self._pos)} positive))")


class PoolView(Sequence):
    """Some of a PromptState's pool samples (all, the positives or the negatives), in pool order; a
    sample is built only when read."""

    __slots__ = ("_st", "_idx")

    def __init__(self, st: PromptState, idx: Sequence[int]):
        self._st, self._idx = st, idx

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._st.sample(j) for j in self._idx[i]]
        return self._st.sample(self._idx[i])

    def __iter__(self):
        return (self._st.sample(j) for j in self._idx)

    @property
    def indices(self) -> Sequence[int]:
        """The pool indices this view holds, in order."""
        return self._idx

    @property
    def rewards(self) -> list[float]:
        r = self._st.rewards
        return [r[j] for j in self._idx]

    def to_wire(self):
        """These samples as they leave the queue (types.groups_to_wire), none built here: the pool's rounds
        and the indices (PromptState.pool_wire) when no sample of the pool was read here, else each
        sample's wire tuple."""
        return self._st.pool_wire(self._idx) or [self._st.wire(j) for j in self._idx]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"PoolView({len(self)} samples)"
