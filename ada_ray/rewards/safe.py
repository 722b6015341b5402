"""SafeScorer: run a reward function so that it can never crash or stall the caller.

inline (workers = 0): exceptions and non-numbers score 0 and are counted; a hang cannot be
bounded, so use it only for trusted, fast functions (exact match).
workers > 0: calls run in a pool of worker processes (spawned, so safe inside threaded actors); a
batch has a deadline of timeout x ceil(calls / workers); calls past it score 0, are counted as
timeouts, and the pool is replaced (the stuck workers are terminated).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from ada_ray.rewards.registry import load_reward


@dataclass
class ScoreStats:
    calls: int = 0
    errors: int = 0  # raised
    timeouts: int = 0  # hung past the deadline
    invalid: int = 0  # returned something that is not a finite number


def _to_score(value) -> Optional[float]:
    if isinstance(value, bool):
        return float(value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _call(spec: str, completion: str, answer: str):
    """Worker-side: returns ('ok', value) or ('error', message)."""
    try:
        return ("ok", load_reward(spec)(completion, answer))
    except BaseException as exc:  # noqa: BLE001 - a plug-in may raise anything
        return ("error", f"{type(exc).__name__}: {exc}")


class SafeScorer:
    def __init__(self, spec: str, timeout_s: float = 5.0, workers: int = 0):
        self.spec = spec
        self.fn = load_reward(spec)  # fail fast on a bad spec, in the caller
        self.timeout_s = timeout_s
        self.workers = workers
        self.stats = ScoreStats()
        self.last_error: Optional[str] = None
        self._pool = None

    def _ensure_pool(self):
        if self._pool is None:
            self._pool = mp.get_context("spawn").Pool(self.workers)
        return self._pool

    def _kill_pool(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def close(self) -> None:
        self._kill_pool()

    def _accept(self, result) -> tuple[float, bool]:
        kind, value = result
        if kind == "error":
            self.stats.errors += 1
            self.last_error = value
            return 0.0, True
        x = _to_score(value)
        if x is None:
            self.stats.invalid += 1
            self.last_error = f"reward returned {value!r}, not a finite number"
            return 0.0, True
        return x, False

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> list[tuple[float, bool]]:
        """(score, failed) per completion; failed means the verifier raised, hung or returned junk."""
        self.stats.calls += len(completions)
        if self.workers <= 0:
            return [self._accept(_call_inline(self.fn, c, a)) for c, a in zip(completions, answers)]
        pool = self._ensure_pool()
        handles = [pool.apply_async(_call, (self.spec, c, a)) for c, a in zip(completions, answers)]
        deadline = time.monotonic() + self.timeout_s * max(1, math.ceil(len(handles) / self.workers))
        out: list[tuple[float, bool]] = []
        hung = False
        for h in handles:
            try:
                out.append(self._accept(h.get(timeout=max(0.0, deadline - time.monotonic()))))
            except mp.TimeoutError:
                self.stats.timeouts += 1
                self.last_error = f"reward timed out after {self.timeout_s}s"
                out.append((0.0, True))
                hung = True
        if hung:
            self._kill_pool()
        return out


def _call_inline(fn, completion: str, answer: str):
    try:
        return ("ok", fn(completion, answer))
    except Exception as exc:  # noqa: BLE001
        return ("error", f"{type(exc).__name__}: {exc}")
