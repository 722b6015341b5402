"""Self-healing runs (`trainer.max_restarts`): which failures the driver heals by itself.

A dead sampler is replaced in place by the Runtime and never reaches here. What does reach here -
the PromptQueue or a learner actor died, a blocking call to them timed out, or a collective (the
weight bus, the learners' DeepSpeed group) broke - ends the runtime; the driver tears it down,
rebuilds it from the last complete checkpoint (or from the start when there is none) and goes on.
Anything else (a config or data mistake, a NaN streak, a bug in our code) is not retried: it would
only fail again.
"""

from __future__ import annotations

from typing import Optional

COLLECTIVE_MARKERS = ("gloo", "nccl", "connection closed by peer", "connection reset by peer")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def what_died(exc: BaseException) -> Optional[str]:
    """A one-line description when `exc` is a failure a rebuilt runtime heals, else None."""
    import ray.exceptions as rex

    from ada_ray.driver.runtime import RuntimeFailure

    if isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError)):
        return f"an actor died ({_first_line(exc)})"
    if isinstance(exc, (RuntimeFailure, rex.GetTimeoutError)):
        return f"a call did not answer ({_first_line(exc)})"
    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause if isinstance(exc.cause, BaseException) else None
        if isinstance(cause, (rex.RayActorError, rex.ActorUnavailableError)):  # a queue shard behind the coordinator
            return f"an actor died ({_first_line(cause)})"
        if cause is not None and _collective_error(cause):
            return f"a collective broke ({_first_line(cause)})"
    if _collective_error(exc):
        return f"a collective broke ({_first_line(exc)})"
    return None


def _collective_error(exc: BaseException) -> bool:
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    return type(exc) is RuntimeError and any(m in str(exc).lower() for m in COLLECTIVE_MARKERS)
