"""Ray's floor under the queue: the CPU a no-op async actor call costs the serving process, with nothing,
with 64 items (x 8 samples) as its argument (one Sample a sample, tokens inline; as samplers report now, one
SampleBlock an item; as numpy columns) or as its answer (64 work items, as objects and as numpy columns), and
with one ObjectRef the server holds. It is the part of the queue's cost that no queue code can remove;
`bench scale` measures it once a run beside its rows.
"""

from __future__ import annotations

import asyncio
import time

import ray

from ada_ray.algo.payloads import remote_report
from ada_ray.algo.types import PayloadBatch, Sample, WorkItem
from ada_ray.bench.common import COMPLETION_TOKENS, PROMPT_TOKENS


@ray.remote(num_cpus=0, max_concurrency=1000)
class NoopQueue:
    """An async actor whose report does nothing: what Ray's actor call costs the serving process.
    `report_held` keeps the last HELD_REPORTS reports, as the queue held a report's payload reference
    until its cohort was taken (a reference inside them makes this process a borrower while it holds it)."""

    HELD_REPORTS = 200

    def __init__(self):
        self.held: list = []
        self.items: list = []
        self.columns: dict = {}

    async def report_many(self, sampler_id: str, reports: list) -> list[bool]:
        return [True] * len(reports)

    async def lease(self, sampler_id: str, max_items: int) -> list:
        """A lease's answer of `max_items` work items (made once, as the scheduler holds them)."""
        if len(self.items) != max_items:
            self.items = [WorkItem(i, f"p{i}", tuple(range(i, i + PROMPT_TOKENS)), "1", 8, 0, 0, i, 0)
                          for i in range(max_items)]
        return self.items

    async def lease_columns(self, sampler_id: str, max_items: int) -> dict:
        """The same answer as numpy columns (what a columnar wire format would carry)."""
        if len(self.columns.get("item_id", ())) != max_items:
            self.columns = item_columns(max_items)
        return self.columns

    async def report_held(self, sampler_id: str, reports: list) -> list[bool]:
        self.held.append(reports)
        del self.held[:-self.HELD_REPORTS]
        return [True] * len(reports)

    async def cpu_s(self) -> float:
        import psutil

        c = psutil.Process().cpu_times()
        return c.user + c.system


@ray.remote(num_cpus=0)
class NoopCaller:
    async def call(self, target, concurrent: int, calls: int, items: int, reference: bool = False,
                   form: str = "samples") -> float:
        """`concurrent` callers each sending `calls` calls of `items` items x 8 samples; seconds taken.
        `form`: what a call carries - "samples", reports of one Sample a sample with its tokens inline (the
        design before this issue); "blocks", reports as the sampler sends them now (one SampleBlock an item,
        the payload batch named, not carried); "columns", the same as numpy columns; "lease" /
        "lease_columns", a lease call answered with `items` work items (objects / numpy columns).
        `reference`: each report also carries a new object's ObjectRef (nested: Ray passes it as a
        reference) and the target holds it (`report_held`), as the queue held payload references."""
        if form in ("lease", "lease_columns"):
            reports = None  # the answer carries the items
        elif form == "blocks":
            batch = PayloadBatch("b0", "sim", "owner")
            reports = [(i, remote_report("p", 0, [1.0, 0.0] * 4, COMPLETION_TOKENS, batch, 8 * i)) for i in range(items)]
        elif form == "columns":
            reports = report_columns(items)
        else:
            reports = [(i, [Sample("p", [7] * COMPLETION_TOKENS, [-0.5] * COMPLETION_TOKENS, 1.0, 0)
                            for _ in range(8)]) for i in range(items)]

        async def one():
            for _ in range(calls):
                if form == "lease":
                    await target.lease.remote("sim", items)
                elif form == "lease_columns":
                    await target.lease_columns.remote("sim", items)
                elif reference:
                    await target.report_held.remote("sim", [(0, [ray.put(b"payload")])] + reports)
                else:
                    await target.report_many.remote("sim", reports)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrent)))
        return time.perf_counter() - t0


def report_columns(items: int) -> dict:
    """A report of `items` items x 8 samples as numpy columns (a columnar wire format: Ray passes the
    arrays' buffers out of band, not one object an item)."""
    import numpy as np

    return {"batch": "b0", "item_id": np.arange(items, dtype=np.int64), "version": np.zeros(items, np.int32),
            "first_row": np.arange(0, 8 * items, 8, dtype=np.int32), "rewards": np.ones((items, 8), np.float32),
            "tokens": np.full((items, 8), COMPLETION_TOKENS, np.int32)}


def item_columns(items: int) -> dict:
    """A lease answer of `items` work items as numpy columns (prompt token ids flat, with offsets)."""
    import numpy as np

    return {"item_id": np.arange(items, dtype=np.int64), "prompt_row": np.arange(items, dtype=np.int64),
            "token_ids": np.arange(items * PROMPT_TOKENS, dtype=np.int32),
            "offsets": np.arange(0, (items + 1) * PROMPT_TOKENS, PROMPT_TOKENS, dtype=np.int64),
            "num_samples": np.full(items, 8, np.int16), "cohort": np.zeros(items, np.int32),
            "round": np.zeros(items, np.int16), "seed": np.arange(items, dtype=np.int64),
            "version": np.zeros(items, np.int32)}


def ray_call_floor(items_per_call: tuple[int, ...] = (0, 64), calls: int = 1200) -> list[dict]:
    """The serving process's CPU per actor call of a method that does nothing, with 0 and with 64 items
    (x 8 samples) as its argument (`form` samples: one Sample a sample, tokens inline; blocks: as samplers
    report now; columns: as numpy columns, a columnar wire format) or as its answer (`form` lease: 64 work
    items; lease_columns: the same as numpy columns): the part of the queue's cost that is Ray's, not the
    queue's; and with no items but one ObjectRef the server holds (`reference`): what a
    payload reference held by the queue cost it (why references stay with their owners,
    actors/ray_payloads.py)."""
    target, caller = NoopQueue.remote(), NoopCaller.remote()
    try:
        ray.get(caller.call.remote(target, 4, 20, 1), timeout=120)  # warm-up
        out = []
        cases = ([(n, False, "samples") for n in items_per_call] + [(0, True, "samples")]
                 + [(n, False, form) for n in items_per_call if n for form in FLOOR_FORMS if form != "samples"])
        for items, reference, form in cases:
            c0 = ray.get(target.cpu_s.remote(), timeout=60)
            seconds = ray.get(caller.call.remote(target, 8, calls // 8, items, reference, form), timeout=600)
            c1 = ray.get(target.cpu_s.remote(), timeout=60)
            out.append({"items": items, "reference": reference, "form": form, "calls_per_s": calls / seconds,
                        "server_cpu_us_per_call": 1e6 * (c1 - c0) / calls})
        return out
    finally:
        ray.kill(target)
        ray.kill(caller)


FLOOR_FORMS = {"samples": "items", "blocks": "items as SampleBlocks", "columns": "items as numpy columns",
               "lease": "work items as its answer", "lease_columns": "work items as its answer in numpy columns"}


def format_floor(f: dict) -> str:
    what = "one ObjectRef it holds" if f.get("reference") else f"{f['items']} " + FLOOR_FORMS[f.get("form", "samples")]
    return (f"Ray's floor: a no-op actor call with {what} costs the serving process "
            f"{f['server_cpu_us_per_call']:.0f} us of CPU ({f['calls_per_s']:.0f} calls/s from 8 concurrent callers)")
