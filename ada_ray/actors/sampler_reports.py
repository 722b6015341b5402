"""Scoring and reporting off the engine's loop thread: `ReportPipeline`.

The sampler loop hands what an engine step finished over in one `put` (a `Job` per request: leased
work, or an evaluation prompt; one append under a lock, one wake-up of this thread) and goes
straight back to stepping the engine. This thread takes everything handed over since its last
pass, scores it in one scorer call (the reward worker pool, when configured, scores it in
parallel), builds the Samples and sends them to the queue in one `report_many` call that it does
not wait for. With a PayloadStore (sampler.payload_transport = object_store, the default) the pass's
token ids, log-probs and texts go into the store as one batch and the queue gets only metadata, one
SampleBlock of columns an item (algo/payloads.py, algo/types.py). It looks at the answers every
`answer_poll_s` (and at once while a flush waits), so a scheduler error still surfaces (`error`, which
the loop raises and dies of).

When the sampler's LeaseFeeder is attached (`carry_asks`), a report call also carries the feeder's
lease ask whenever one is due (sampler_leases.py): one queue call where there were two.

`report_interval_s` (sampler.report_interval_s, `report_interval`): at most one report call that often.
Work handed over sooner waits, scored with what comes after it, and goes in one call (a flush or close
sends at once). An engine finishes a few sequences a step, so with long generations a pass holds about
one item and a sampler made about one queue call an item; each call costs the queue a fixed share of a
millisecond of CPU (BENCHMARKS: Ray's floor). 0: a call every pass, as soon as the work is scored.

Guarantees: reports leave in the order the loop handed the items over; a reward function that
raises, hangs or returns junk scores 0 with reward_error (SafeScorer), and so does every completion
of a batch whose scorer call itself fails, so nothing handed over is ever dropped; `close` sends
everything handed over and waits, up to a deadline, for the queue's answers (a sampler's stop).
No Ray here: the queue is a `QueueLink`.
"""

from __future__ import annotations

import threading
import time
import traceback
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ada_ray.actors.sampler_links import QueueLink, Scorer
from ada_ray.algo.payloads import PayloadStore, pack
from ada_ray.algo.types import Sample, SampleBlock, WorkItem
from ada_ray.engines.protocol import Completion

Scores = list[tuple[float, bool]]

# sampler.report_interval_s = null (auto) in async mode. BENCHMARKS "Samplers shaped as the real one": the
# main job's queue calls -65% and its step time unchanged; bench scale, 64 samplers: the queue's CPU an
# item -19% to -30%. In sync mode auto is 0: every round of a step would wait out its held reports.
AUTO_REPORT_INTERVAL_S = 0.25


def report_interval(cfg: Any) -> float:
    """The seconds a sampler's report calls are at least apart: sampler.report_interval_s, or when it is
    null, AUTO_REPORT_INTERVAL_S in async mode (the samplers run ahead of the learner: a held report is off
    the step's path) and 0 in sync mode."""
    if cfg.sampler.report_interval_s is not None:
        return float(cfg.sampler.report_interval_s)
    return AUTO_REPORT_INTERVAL_S if cfg.trainer.mode == "async" else 0.0


class ReportError(RuntimeError):
    """The pipeline stopped: a report the queue refused, or a deadline missed."""


@dataclass
class Job:
    """One finished request to score: leased work (reported to the queue, its samples carrying
    `start_version`) or an evaluation prompt (`on_scores` gets the scores, on the pipeline's thread)."""

    completions: Sequence[Completion]
    answer: str
    item: Optional[WorkItem] = None
    start_version: int = 0
    on_scores: Optional[Callable[[Scores], None]] = None

    @classmethod
    def work(cls, item: WorkItem, start_version: int, completions: Sequence[Completion]) -> "Job":
        return cls(completions, item.answer, item=item, start_version=start_version)

    @classmethod
    def evaluation(cls, completions: Sequence[Completion], answer: str, on_scores: Callable[[Scores], None]) -> "Job":
        return cls(completions, answer, on_scores=on_scores)


def settle(fut: Future, result: Any = None, exc: Optional[BaseException] = None) -> None:
    """Resolve `fut` unless another thread already has (a loop that died fails it first)."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except InvalidStateError:
        pass


class ReportPipeline:
    # how long the thread sleeps waiting for new work: while reports await their answers (they only
    # surface errors: no hurry); while a flush waits for them; while nothing at all is pending
    answer_poll_s = 0.25
    flush_poll_s = 0.005
    idle_s = 1.0

    def __init__(self, sampler_id: str, queue: QueueLink, scorer: Scorer, payloads: Optional[PayloadStore] = None,
                 report_interval_s: float = 0.0):
        self.id = sampler_id
        self.report_interval_s = report_interval_s
        self.queue = queue
        self.scorer = scorer
        self.payloads = payloads  # None: token ids and log-probs ride in the report (inline transport)
        self.error: Optional[str] = None
        self.last_scorer_error: Optional[str] = None
        self.stats = {"items": 0, "samples": 0, "tokens": 0, "reward_errors": 0, "scorer_failures": 0,
                      "score_s": 0.0, "report_s": 0.0, "report_calls": 0, "report_cpu_s": 0.0, "payload_batches": 0,
                      "payload_mb": 0.0}
        self._cv = threading.Condition()
        self._jobs: list[Job] = []  # handed over, not yet taken by the thread
        self._taken = 0  # taken by the thread, not yet scored and sent
        self._unanswered: list = []  # report handles the queue has not answered yet (thread only)
        self._backlog = 0  # samples handed over and not yet scored
        self._closing = False
        self._abandon = False
        self._flushing = 0  # flush calls waiting
        self._collected_at = 0.0  # when the thread last looked at the answers
        self._sent_at = -float("inf")  # when the thread last took work to send (monotonic)
        self.leases: Any = None  # the LeaseFeeder whose due asks ride this pipeline's reports (carry_asks)
        self._thread = threading.Thread(target=self._run, name=f"sampler-{sampler_id}-reports", daemon=True)
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------------

    def put(self, jobs: list[Job]) -> None:
        """Hand finished requests over, in the order they finished."""
        with self._cv:
            if self._closing:
                raise ReportError(f"sampler {self.id}: report pipeline is closed")
            self._jobs.extend(jobs)
            self._backlog += sum(len(j.completions) for j in jobs)
            self._cv.notify_all()

    def carry_asks(self, feeder: Any) -> None:
        """Let report calls carry `feeder`'s lease asks (LeaseFeeder.claim / adopt / unclaim / nudge)."""
        self.leases = feeder

    @property
    def backlog_samples(self) -> int:
        """Samples handed over and not yet scored."""
        return self._backlog

    def raise_if_failed(self) -> None:
        if self.error:
            raise ReportError(f"sampler {self.id}: report pipeline failed: {self.error}")

    def flush(self, timeout: float, what: str = "flush") -> None:
        """Wait until everything handed over is scored, sent and answered (TimeoutError past `timeout`)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._flushing += 1
            self._cv.notify_all()
            try:
                while self._jobs or self._taken or self._unanswered:
                    if self.error:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(
                            f"sampler {self.id}: report pipeline {what}: {len(self._jobs) + self._taken} finished "
                            f"request(s) not yet scored and sent, {len(self._unanswered)} report call(s) "
                            f"unanswered after {timeout:g}s")
                    self._cv.wait(min(left, self.flush_poll_s))
            finally:
                self._flushing -= 1
        self.raise_if_failed()

    def close(self, timeout: float) -> None:
        """Send everything handed over, wait for the answers (up to `timeout`), stop the thread."""
        try:
            self.flush(timeout, "close")
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop the thread without sending what is left (the queue hands that work out again)."""
        with self._cv:
            self._closing = self._abandon = True
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self.idle_s + 5.0)

    # -- the pipeline's thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    if not self._due() and not self._abandon:
                        self._cv.wait(self._sleep_s())
                    if self._abandon:
                        return
                    jobs, self._jobs = (self._jobs, []) if self._due() else ([], self._jobs)
                    self._taken = len(jobs)
                    if jobs:
                        self._sent_at = time.monotonic()
                cpu0 = time.thread_time()
                if jobs:
                    self._send(jobs)
                if self._flushing or time.monotonic() >= self._collected_at + self.answer_poll_s:
                    self._collect()  # not after every send: each look at the answers is a queue-link call
                self.stats["report_cpu_s"] += time.thread_time() - cpu0
                with self._cv:
                    self._taken = 0
                    self._cv.notify_all()
        except Exception:  # noqa: BLE001 - the loop raises it on its next tick
            self.error = traceback.format_exc(limit=8)
            with self._cv:
                self._taken = 0
                self._cv.notify_all()

    def _hold_s(self) -> float:
        """How much longer work handed over waits before it is sent (report_interval_s; <= 0: due now)."""
        if self._flushing or self._closing:
            return 0.0
        return self._sent_at + self.report_interval_s - time.monotonic()

    def _due(self) -> bool:
        """Work is waiting and may be sent now."""
        return bool(self._jobs) and self._hold_s() <= 0

    def _sleep_s(self) -> float:
        if self._jobs:  # held back by the interval
            held = max(0.0, self._hold_s())
            return min(held, self.answer_poll_s) if self._unanswered else held
        if not self._unanswered:
            return self.idle_s
        return self.flush_poll_s if self._flushing else self.answer_poll_s

    def _score(self, jobs: list[Job]) -> Scores:
        texts = [c.text for j in jobs for c in j.completions]
        answers = [j.answer for j in jobs for _ in j.completions]
        t0 = time.perf_counter()
        try:
            scores = self.scorer.score(texts, answers)
            if len(scores) != len(texts):
                raise ValueError(f"scorer returned {len(scores)} scores for {len(texts)} completions")
        except Exception as exc:  # noqa: BLE001 - never lose the work: score 0, flagged
            self.stats["scorer_failures"] += 1
            self.last_scorer_error = f"{type(exc).__name__}: {exc}"
            scores = [(0.0, True)] * len(texts)
        self.stats["score_s"] += time.perf_counter() - t0
        return scores

    def _send(self, jobs: list[Job]) -> None:
        scores = self._score(jobs)
        work: list[tuple[Job, Scores]] = []
        i = 0
        for j in jobs:
            mine, i = scores[i:i + len(j.completions)], i + len(j.completions)
            if j.item is None:
                j.on_scores(mine)
            else:
                work.append((j, mine))
        batch = (self._put_payloads([c for j, _ in work for c in j.completions], max(j.start_version for j, _ in work))
                 if work and self.payloads else None)
        reports: list[tuple[int, Sequence[Sample]]] = []
        row = 0
        for j, mine in work:
            it = j.item
            if batch is None:
                samples = [Sample(it.prompt_id, c.token_ids, c.logprobs, score, j.start_version, it.round, c.text,
                                  c.finish_reason, failed) for c, (score, failed) in zip(j.completions, mine)]
            else:  # one block of columns an item: the queue builds a Sample only for the ones it keeps
                finish = [c.finish_reason for c in j.completions]
                errors = [failed for _, failed in mine]
                samples = SampleBlock(it.prompt_id, j.start_version, [score for score, _ in mine],
                                      [len(c.token_ids) for c in j.completions], batch, row,
                                      None if all(f == "stop" for f in finish) else finish,
                                      errors if any(errors) else None, it.round)
                row += len(j.completions)
            reports.append((it.item_id, samples))
            self.stats["items"] += 1
            self.stats["samples"] += len(samples)
            self.stats["tokens"] += sum(len(c.token_ids) for c in j.completions)
            self.stats["reward_errors"] += sum(1 for _, failed in mine if failed)
        # an ask is claimed before the backlog falls: the feeder, which leaves its asks to a coming report,
        # must not start one of its own in between
        ask = self.leases.claim() if reports and self.leases is not None else None
        with self._cv:
            self._backlog -= len(scores)
        if self.leases is not None and ask is None:
            self.leases.nudge()
        if reports:
            t0 = time.perf_counter()
            try:
                pending = self.queue.report_many(self.id, reports, ask)
            except BaseException:
                if ask is not None:
                    self.leases.unclaim()
                raise
            if ask is not None:
                self.leases.adopt(pending)
            self._unanswered.append(pending)
            self.stats["report_s"] += time.perf_counter() - t0
            self.stats["report_calls"] += 1

    def _put_payloads(self, completions: list[Completion], version: int):
        """One batch in the payload store for every sample of this pass (`version`: the newest its samples
        were started under, which decides when the batch expires)."""
        arrays = pack([c.token_ids for c in completions], [c.logprobs or [] for c in completions],
                      [c.text for c in completions])
        self.stats["payload_batches"] += 1
        self.stats["payload_mb"] += (arrays["ids"].nbytes + arrays["logprobs"].nbytes) / 2**20
        return self.payloads.put(arrays, self.id, version)

    def _collect(self) -> None:
        """Take the answers that have come (without waiting); a refused report raises here."""
        self._collected_at = time.monotonic()
        if not self._unanswered:
            return
        ready, rest = self.queue.wait(self._unanswered, 0)
        for r in ready:
            self.queue.get(r)  # raises what the scheduler raised (and the handle stays unanswered)
        self._unanswered = rest
