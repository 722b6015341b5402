"""Stand-ins for the sampler loop's engine, queue and scorer: deterministic, no Ray, no vLLM."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

from ada_ray.algo.scheduler import WorkScheduler
from ada_ray.algo.types import Signal
from ada_ray.engines.protocol import Completion, Finished


class FakeEngine:
    """Request `rid` finishes `steps` engine steps after it is added (`steps_for(prompt_ids)` when
    given); its completion j has the text `reply(prompt_ids, seed, j)` (tokens: the characters'
    codes, behaviour log-prob -0.5 each)."""

    def __init__(self, reply: Callable[[tuple, Optional[int], int], str] = lambda p, s, j: "x", steps: int = 1,
                 steps_for: Optional[Callable[[tuple], int]] = None):
        self.reply = reply
        self.steps = steps
        self.steps_for = steps_for
        self.stepped = 0
        self.running: dict[str, list] = {}  # rid -> [prompt ids, n, seed, steps left]
        self.added: list[tuple] = []  # (rid, prompt ids, n, seed, temperature, max_tokens)
        self.aborts = 0
        self.versions: list[int] = []  # updates received
        self.fail_updates = False
        self.step_error: Optional[Exception] = None

    def add(self, request_id: str, prompt_ids: Sequence[int], n: int, seed: Optional[int],
            temperature: Optional[float] = None, max_tokens: Optional[int] = None) -> None:
        self.added.append((request_id, tuple(prompt_ids), n, seed, temperature, max_tokens))
        steps = self.steps_for(tuple(prompt_ids)) if self.steps_for else self.steps
        self.running[request_id] = [tuple(prompt_ids), n, seed, steps]

    def step(self) -> list[Finished]:
        if self.step_error is not None:
            raise self.step_error
        self.stepped += 1
        out = []
        for rid, req in list(self.running.items()):
            req[3] -= 1
            if req[3] <= 0:
                del self.running[rid]
                texts = [self.reply(req[0], req[2], j) for j in range(req[1])]
                out.append(Finished(rid, [Completion([ord(c) for c in t], [-0.5] * len(t), t, "stop")
                                          for t in texts]))
        return out

    def has_unfinished(self) -> bool:
        return bool(self.running)

    def abort_all(self) -> None:
        self.running.clear()
        self.aborts += 1

    def score_completion(self, prompt_ids, completion_ids, temperature=None) -> list[float]:
        return [-1.0] * len(completion_ids)

    def join_bus(self, host, port, base_rank, world_size, backend, timeout_s):
        return None

    def receive_weights(self, meta: dict) -> None:
        if self.fail_updates:
            raise RuntimeError("broadcast broke mid-update")
        self.versions.append(int(meta["version"]))

    def leave_bus(self) -> None:
        pass

    def weight_checksum(self) -> float:
        return float(sum(self.versions))


class Ref:
    """A pending call's handle: resolved unless held."""

    def __init__(self, value: Any, ready: bool = True):
        self.value = value
        self.ready = ready


class ScriptedQueue:
    """PromptQueue whose lease answers are scripted (WorkItem lists or Signal.STOP, then []);
    records every lease call and report. `hold_leases` / `hold_reports`: those handles stay pending."""

    def __init__(self, leases: Sequence = ()):
        self.leases = list(leases)
        self.lease_calls: list[tuple] = []  # (sampler id, max items, max samples, wait s)
        self.lease_refs: list[Ref] = []  # the handles lease calls returned (a held one: set .ready)
        self.reports: list[tuple] = []  # (item id, samples)
        self.hold_leases = False
        self.hold_reports = False
        self.wait_calls = 0
        self.report_error: Optional[Exception] = None

    def lease(self, sampler_id, max_items, max_samples, wait_s):
        self.lease_calls.append((sampler_id, max_items, max_samples, wait_s))
        self.lease_refs.append(Ref(self.leases.pop(0) if self.leases else [], ready=not self.hold_leases))
        return self.lease_refs[-1]

    def report_many(self, sampler_id, reports, lease=None):
        """`lease`: an ask riding the report (max_items, max_samples, wait_s), recorded in lease_calls and
        answered from the script; the answer is then (the bools, the lease answer)."""
        if self.report_error is not None:
            return Ref(self.report_error)
        self.reports.extend(reports)
        answers = [True] * len(reports)
        if lease is not None:
            self.lease_calls.append((sampler_id, *lease))
            answers = (answers, self.leases.pop(0) if self.leases else [])
        return Ref(answers, ready=not self.hold_reports)

    def wait(self, pending, timeout):
        self.wait_calls += 1
        return [p for p in pending if p.ready], [p for p in pending if not p.ready]

    def get(self, ref):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value


class SchedulerQueue(ScriptedQueue):
    """The real WorkScheduler behind the QueueLink verbs (what the PromptQueue actor does, minus Ray;
    a lock stands in for the actor's one thread: leases and reports come from two threads)."""

    def __init__(self, sched: WorkScheduler):
        super().__init__()
        self.sched = sched
        self.stopped = False
        self.lock = threading.Lock()

    def lease(self, sampler_id, max_items, max_samples, wait_s):
        with self.lock:
            self.lease_calls.append((sampler_id, max_items, max_samples, wait_s))
            if self.stopped:
                return Ref(Signal.STOP)
            return Ref(self.sched.lease(sampler_id, max_items, 0.0, max_samples))

    def report_many(self, sampler_id, reports, lease=None):
        with self.lock:
            try:
                answers = [self.sched.report(sampler_id, iid, samples) for iid, samples in reports]
            except Exception as exc:  # noqa: BLE001 - surfaces in the loop, as ray.get would
                return Ref(exc)
            if lease is None:
                return Ref(answers)
            self.lease_calls.append((sampler_id, *lease))
            return Ref((answers, Signal.STOP if self.stopped else self.sched.lease(sampler_id, lease[0], 0.0, lease[1])))


class GatedScorer:
    """Wraps a scorer; each call blocks until `gate` is set (a slow verifier), or raises `error`.
    Records the completions of every call."""

    def __init__(self, inner, error: Optional[Exception] = None, timeout_s: float = 5.0):
        self.inner = inner
        self.error = error
        self.timeout_s = timeout_s
        self.gate = threading.Event()
        self.entered = threading.Event()  # set when a call is waiting at the gate
        self.calls: list[list[str]] = []

    def score(self, completions, answers):
        self.calls.append(list(completions))
        self.entered.set()
        if not self.gate.wait(self.timeout_s):
            raise TimeoutError(f"GatedScorer: gate not opened within {self.timeout_s}s")
        if self.error is not None:
            raise self.error
        return self.inner.score(completions, answers)
