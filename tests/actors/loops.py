"""Building a SamplerLoop for the tests: work items, reply rules, ticking; `conftest.py` stops the
report pipeline of every loop made here when its test ends."""

from __future__ import annotations

import time

from ada_ray.actors.sampler_loop import SamplerLoop
from ada_ray.algo.types import WorkItem
from ada_ray.rewards import SafeScorer
from tests.actors.fakes import FakeEngine

LOOPS: list[SamplerLoop] = []


def item(item_id, k=2, answer="ok", prompt=(1, 2), round_=0, seed=None):
    return WorkItem(item_id, f"p{item_id}", tuple(prompt), answer, k, 0, round_, seed or 100 + item_id, 0)


def first_j_right(j_right=1):
    """Completion j is right ('ok') for j < j_right, else wrong."""
    return lambda prompt, seed, j: "ok" if j < j_right else "no"


def make_loop(queue, engine=None, reward="exact", capacity=8, version=0, scorer=None, payloads=None, max_staleness=0):
    """A loop whose lease feeder asks again after an empty answer only when the loop's state changes
    (a finished item, sampling switched on), never on a timer: `tick` then sees a fixed sequence."""
    loop = SamplerLoop("s0", engine or FakeEngine(first_j_right()), queue, scorer or SafeScorer(reward), capacity,
                       version, payloads, max_staleness)
    loop.idle_sampling_s = loop.idle_paused_s = 0.001
    loop.feeder.poll_s = 0.001
    loop.feeder.empty_backoff_s = 60.0
    LOOPS.append(loop)
    return loop


def tick(loop, n, flush=True):
    """n ticks, each after the lease feeder has the queue's answer to what the loop did last; then
    (flush) wait until the report pipeline has scored, sent and collected what finished."""
    for _ in range(n):
        loop.feeder.settle(2.0)
        loop.tick()
    loop.feeder.settle(2.0)
    if flush:
        loop.reports.flush(2.0)


def wait_until(cond, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)
