"""The records that flow through the system: one scored Sample, one training Group, and the
Signal values that stand in for a record where there is none."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional


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


@dataclass
class Sample:
    """One generated response. Every sample carries its prompt id, the policy version that
    produced it, the behaviour log-probs of its tokens, and its reward (ARCHITECTURE invariant 2)."""

    prompt_id: str
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    reward: float
    version: int
    round: int = 0
    text: str = ""
    finish_reason: str = "stop"
    reward_error: bool = False  # the verifier raised or timed out (scored 0)

    def positive(self, threshold: float) -> bool:
        return self.reward > threshold


@dataclass
class Group:
    """A prompt's training group: the kept samples and their advantages, plus what the pool saw."""

    prompt_id: str
    prompt_ids: list[int]
    samples: list[Sample]
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
