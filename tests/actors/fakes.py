"""Stand-ins for the sampler loop's engine and queue: deterministic, no Ray, no vLLM."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ada_ray.algo.scheduler import WorkScheduler
from ada_ray.algo.types import Signal
from ada_ray.engines.protocol import Completion, Finished


class FakeEngine:
    """Request `rid` finishes `steps` engine steps after it is added; its completion j has the text
    `reply(prompt_ids, seed, j)` (tokens: the characters' codes, behaviour log-prob -0.5 each)."""

    def __init__(self, reply: Callable[[tuple, Optional[int], int], str] = lambda p, s, j: "x", steps: int = 1):
        self.reply = reply
        self.steps = steps
        self.running: dict[str, list] = {}  # rid -> [prompt ids, n, seed, steps left]
        self.added: list[tuple] = []  # (rid, prompt ids, n, seed, temperature, max_tokens)
        self.aborts = 0
        self.versions: list[int] = []  # updates received
        self.fail_updates = False
        self.step_error: Optional[Exception] = None

    def add(self, request_id: str, prompt_ids: Sequence[int], n: int, seed: Optional[int],
            temperature: Optional[float] = None, max_tokens: Optional[int] = None) -> None:
        self.added.append((request_id, tuple(prompt_ids), n, seed, temperature, max_tokens))
        self.running[request_id] = [tuple(prompt_ids), n, seed, self.steps]

    def step(self) -> list[Finished]:
        if self.step_error is not None:
            raise self.step_error
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
    records every lease call and report. `hold_leases`: lease handles stay pending."""

    def __init__(self, leases: Sequence = ()):
        self.leases = list(leases)
        self.lease_calls: list[tuple] = []  # (sampler id, max items, max samples, wait s)
        self.reports: list[tuple] = []  # (item id, samples)
        self.hold_leases = False
        self.report_error: Optional[Exception] = None

    def lease(self, sampler_id, max_items, max_samples, wait_s):
        self.lease_calls.append((sampler_id, max_items, max_samples, wait_s))
        return Ref(self.leases.pop(0) if self.leases else [], ready=not self.hold_leases)

    def report_many(self, sampler_id, reports):
        if self.report_error is not None:
            return Ref(self.report_error)
        self.reports.extend(reports)
        return Ref([True] * len(reports))

    def wait(self, pending, timeout):
        return [p for p in pending if p.ready], [p for p in pending if not p.ready]

    def get(self, ref):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value


class SchedulerQueue(ScriptedQueue):
    """The real WorkScheduler behind the QueueLink verbs (what the PromptQueue actor does, minus Ray)."""

    def __init__(self, sched: WorkScheduler):
        super().__init__()
        self.sched = sched
        self.stopped = False

    def lease(self, sampler_id, max_items, max_samples, wait_s):
        self.lease_calls.append((sampler_id, max_items, max_samples, wait_s))
        if self.stopped:
            return Ref(Signal.STOP)
        return Ref(self.sched.lease(sampler_id, max_items, 0.0, max_samples))

    def report_many(self, sampler_id, reports):
        try:
            return Ref([self.sched.report(sampler_id, iid, samples) for iid, samples in reports])
        except Exception as exc:  # noqa: BLE001 - surfaces in the loop, as ray.get would
            return Ref(exc)
