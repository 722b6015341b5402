"""The seam between the sampler loop and its generation backend: the `Engine` protocol and the
records an engine returns. `VLLMEngine` satisfies it (checked in tests/actors/test_sampler_loop.py);
the sampler-loop tests drive a scripted fake through it, without vLLM or Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence, runtime_checkable


@dataclass
class Completion:
    """One finished sample: its tokens, the behaviour log-prob of each, its text, why it ended."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


@dataclass
class Finished:
    """A request whose n samples have all finished."""

    request_id: str
    completions: list[Completion]


@runtime_checkable
class Engine(Protocol):
    """The verbs the sampler calls on its engine, all from the one loop thread that owns it."""

    def add(self, request_id: str, prompt_ids: Sequence[int], n: int, seed: Optional[int],
            temperature: Optional[float] = None, max_tokens: Optional[int] = None) -> None:
        """Queue n samples of one prompt (continuous batching: they start as capacity frees)."""

    def step(self) -> list[Finished]:
        """One engine step; the requests that finished in it."""

    def has_unfinished(self) -> bool: ...

    def abort_all(self) -> None:
        """Drop every request in the engine (nothing of them is returned)."""

    def score_completion(self, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                         temperature: Optional[float] = None) -> list[float]:
        """Log-prob of each completion token (an idle engine only)."""

    def join_bus(self, host: str, port: int, base_rank: int, world_size: int, backend: str, timeout_s: float):
        """Join the WeightBus process group."""

    def receive_weights(self, meta: dict) -> None:
        """Load one broadcast update (meta: version and bucket layout); raises if it fails."""

    def leave_bus(self) -> None: ...

    def weight_checksum(self) -> float: ...
