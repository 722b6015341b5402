"""The sampler's seams to the outside, as Protocols: `QueueLink` (the PromptQueue: leases and
reports, through pending handles that never block) and `Scorer` (rewards.SafeScorer). The loop
(sampler_loop.py) and its report pipeline (sampler_reports.py) depend on these, not on Ray; the
Ray shell (sampler.py) supplies `RayQueueLink`, the tests the fakes in tests/actors/fakes.py.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

from ada_ray.algo.types import Sample


class QueueLink(Protocol):
    """How the sampler reaches the PromptQueue: calls return pending handles, never block."""

    def lease(self, sampler_id: str, max_items: int, max_samples: int, wait_s: float) -> Any:
        """Pending list[WorkItem] (possibly empty) or Signal.STOP."""

    def report_many(self, sampler_id: str, reports: list[tuple[int, list[Sample]]], lease: Optional[tuple] = None) -> Any:
        """Pending list[bool]; getting it raises what the scheduler raised. `lease` (max_items, max_samples,
        wait_s): a lease ask rides the report, answered as `lease` would answer it; the answer is then
        (list[bool], the lease's answer)."""

    def wait(self, pending: list, timeout: float) -> tuple[list, list]:
        """(ready, not ready) once all are ready or `timeout` seconds have passed (0: do not wait)."""

    def get(self, pending: Any) -> Any: ...


class Scorer(Protocol):
    """rewards.SafeScorer: (score, failed) per completion; never raises for a bad reward function."""

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> list[tuple[float, bool]]: ...
