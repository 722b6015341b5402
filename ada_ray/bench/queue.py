"""`ada-ray bench queue`: PromptQueue overhead.

1. Scheduler operations per second, pure (no Ray): lease + report of Reinforce-Ada-Seq-balance work
   for a large synthetic dataset (fake samples, Bernoulli rewards); and where the queue's CPU per work
   item goes, in process (`per_item_split`): the scheduler's lease, pickling the leased items, unpickling a
   report (what Ray does to a report call's argument in the queue), the scheduler's report, taking a cohort
   and pickling it for the driver, opening the next cohort as the version moves - every part of an item's
   path through the queue but Ray's call; reports as SampleBlocks (now) and as one Sample a sample (before),
   interleaved twice.
2. Through the Ray actor: lease / report round trips per second from one client.
3. The queue's share of a real training run's wall time: the actor's busy seconds over the run's
   elapsed time, from `queue/busy_s_total` in a run's metrics (target <= 1%).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ada_ray.algo.scheduler import WorkScheduler
from ada_ray.algo.types import Prompt, Sample
from ada_ray.bench.common import bar_chart, write_result
from ada_ray.config import AlgoConfig, load_config


def _prompts(n: int) -> list[Prompt]:
    return [Prompt(f"p{i}", f"q{i}", tuple(range(20)), "1", "x") for i in range(n)]


def _samples(item, rng) -> list[Sample]:
    return [Sample(item.prompt_id, [5, 6, 2], [-0.1, -0.2, -0.3], 1.0 if rng.random() < 0.15 else 0.0, item.version)
            for _ in range(item.num_samples)]


def pure_ops(prompts: int, batch: int, steps: int) -> dict:
    s = WorkScheduler(_prompts(prompts), AlgoConfig(name="ada_seq_balance"), batch_prompts=batch,
                      max_staleness=2, total_steps=steps)
    rng = random.Random(0)
    ops = 0
    busy = 0.0
    step = 0
    while step < steps:
        t0 = time.perf_counter()
        items = s.lease("s", 64, 0.0)
        busy += time.perf_counter() - t0
        ops += 1
        reports = [(it, _samples(it, rng)) for it in items]
        t0 = time.perf_counter()
        for it, smp in reports:
            s.report("s", it.item_id, smp)
            ops += 1
        while s.cohort_status(step) == "ready":
            s.take_cohort(step)
            step += 1
            s.set_version(step)
            ops += 1
        busy += time.perf_counter() - t0
    return {"ops": ops, "seconds": busy, "ops_per_s": ops / busy, "groups": steps * batch,
            "groups_per_s": steps * batch / busy}


def per_item_split(prompts: int = 100_000, batch: int = 1024, steps: int = 12, items_per_call: int = 64,
                   pass_rate: float = 0.3, seed: int = 0, blocks: bool = True) -> dict:
    """Microseconds of queue CPU per work item, by part, in process (no Ray), for Seq-balance work with
    object-store samples (metadata and a payload row, as the default transport reports them): each
    item one SampleBlock of columns (`blocks`, as the sampler reports now) or one Sample object a
    sample (before). The heap is frozen after loading and the young generation's threshold raised, and
    what survived a step frozen as each cohort is taken, as the PromptQueue actor does (`settle_heap`,
    `freeze_survivors`)."""
    import gc
    import pickle

    from ada_ray.actors.prompt_queue import freeze_survivors, settle_heap
    from ada_ray.algo.payloads import remote_report
    from ada_ray.algo.types import PayloadBatch, WorkBatch

    s = WorkScheduler(_prompts(prompts), AlgoConfig(name="ada_seq_balance"), batch_prompts=batch,
                      max_staleness=2, total_steps=steps, seed=seed)
    threshold = gc.get_threshold()
    settle_heap()
    rng = random.Random(seed)
    parts = dict.fromkeys(("lease", "lease_pickle", "report_unpickle", "report", "take_cohort", "cohort_pickle",
                           "open_cohort"), 0.0)
    items_total = samples_total = calls = 0
    step = 0

    def timed(part, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        parts[part] += time.perf_counter() - t0
        return out

    try:
        while step < steps:
            items = timed("lease", s.lease, "s", items_per_call, 0.0)
            if not items:
                raise RuntimeError(f"per_item_split: no work ready before cohort {step} was complete")
            timed("lease_pickle", lambda its: pickle.dumps(WorkBatch.of(its)), items)  # as PromptQueue answers
            calls += 1
            batch_ref = PayloadBatch(f"b{calls}", "s", [None])
            reports, row = [], 0
            for it in items:
                rewards = [1.0 if rng.random() < pass_rate else 0.0 for _ in range(it.num_samples)]
                reports.append((it.item_id, remote_report(it.prompt_id, it.version, rewards, 512, batch_ref, row,
                                                          blocks)))
                row += it.num_samples
            wire = pickle.dumps(reports)
            reports = timed("report_unpickle", pickle.loads, wire)
            t0 = time.perf_counter()
            for item_id, samples in reports:
                s.report("s", item_id, samples)
            parts["report"] += time.perf_counter() - t0
            items_total += len(items)
            samples_total += row
            while s.cohort_status(step) == "ready":
                res = timed("take_cohort", s.take_cohort, step)
                timed("take_cohort", freeze_survivors)  # as PromptQueue.wait_cohort does
                timed("cohort_pickle", pickle.dumps, res)
                step += 1
                timed("open_cohort", s.set_version, step)  # the version moves: the next cohort opens
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    us = {k: 1e6 * v / items_total for k, v in parts.items()}
    return {"report_form": "blocks" if blocks else "samples", "prompts": prompts, "batch": batch, "steps": steps,
            "items_per_call": items_per_call, "items": items_total,
            "samples_per_item": samples_total / items_total, "us_per_item": us, "total_us_per_item": sum(us.values())}


def actor_round_trips(n: int) -> dict:
    import ray

    from ada_ray.driver import cluster as cl
    from ada_ray.actors.prompt_queue import PromptQueue

    cfg = load_config("ada_seq_balance", ["trainer.batch_prompts=64", "trainer.total_steps=1000000"])
    c = cl.connect(cfg)
    try:
        from ada_ray.config import to_dict

        q = PromptQueue.remote(_prompts(20000), to_dict(cfg))
        rng = random.Random(0)
        t0 = time.perf_counter()
        calls = 0
        while calls < n:
            items = ray.get(q.lease.remote("s", 8, None, 0.0))
            calls += 1
            if items:
                ray.get(q.report_many.remote("s", [(it.item_id, _samples(it, rng)) for it in items]))
                calls += 1
        dt = time.perf_counter() - t0
        ray.kill(q)
        return {"calls": calls, "seconds": dt, "calls_per_s": calls / dt}
    finally:
        c.shutdown()


def run_share(metrics_file: Path) -> dict:
    rows = [json.loads(x) for x in metrics_file.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "queue/busy_s_total" in r]
    if len(rows) < 2:
        return {}
    busy = rows[-1]["queue/busy_s_total"] - rows[0]["queue/busy_s_total"]
    wall = rows[-1]["time/elapsed"] - rows[0]["time/elapsed"]
    return {"queue_busy_s": busy, "wall_s": wall, "queue_share": busy / wall, "run": str(metrics_file.parent.name)}


def run(out_dir: Path = Path("results"), smoke: bool = False, steps: int = 200) -> dict:
    if smoke:
        steps = 5
    pure = pure_ops(prompts=20000 if not smoke else 500, batch=512 if not smoke else 16, steps=steps if not smoke else 5)
    split = [per_item_split(prompts=100_000 if not smoke else 2_000, batch=1024 if not smoke else 32,
                            steps=12 if not smoke else 3, blocks=blocks) for blocks in (False, True, False, True)]
    actor = actor_round_trips(2000 if not smoke else 50)
    shares = []
    for f in sorted((out_dir / "system_runs").glob("*/metrics.jsonl")):
        sh = run_share(f)
        if sh:
            shares.append(sh)
    result = {"pure": pure, "split": split, "actor": actor, "training_runs": shares}
    write_result(out_dir, "queue", result)
    if shares:
        bar_chart(out_dir / "queue.png", "PromptQueue busy time / run wall time (target <= 1%)", "percent",
                  {s["run"]: {"queue share": 100 * s["queue_share"]} for s in shares})
    return result


def format_table(result: dict) -> str:
    p, a = result["pure"], result["actor"]
    lines = [f"- scheduler (pure): {p['ops_per_s']:.0f} ops/s, {p['groups_per_s']:.0f} groups/s",
             f"- PromptQueue actor: {a['calls_per_s']:.0f} lease/report round trips/s"]
    for sp in result.get("split", []):
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sp["us_per_item"].items())
        lines.append(f"- queue CPU per work item in process, reports as {sp['report_form']} ({sp['prompts']:,} prompts, "
                     f"B = {sp['batch']}, {sp['items_per_call']} items a call, {sp['samples_per_item']:.1f} samples an "
                     f"item): {sp['total_us_per_item']:.1f} us ({parts})")
    for s in result["training_runs"]:
        lines.append(f"- queue share of wall time in {s['run']}: {100 * s['queue_share']:.3f}%")
    return "\n".join(lines)
