"""`ada-ray bench queue`: PromptQueue overhead.

1. Scheduler operations per second, pure (no Ray): lease + report of Reinforce-Ada-Seq-balance work
   for a large synthetic dataset (fake samples, Bernoulli rewards).
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
    actor = actor_round_trips(2000 if not smoke else 50)
    shares = []
    for f in sorted((out_dir / "system_runs").glob("*/metrics.jsonl")):
        sh = run_share(f)
        if sh:
            shares.append(sh)
    result = {"pure": pure, "actor": actor, "training_runs": shares}
    write_result(out_dir, "queue", result)
    if shares:
        bar_chart(out_dir / "queue.png", "PromptQueue busy time / run wall time (target <= 1%)", "percent",
                  {s["run"]: {"queue share": 100 * s["queue_share"]} for s in shares})
    return result


def format_table(result: dict) -> str:
    p, a = result["pure"], result["actor"]
    lines = [f"- scheduler (pure): {p['ops_per_s']:.0f} ops/s, {p['groups_per_s']:.0f} groups/s",
             f"- PromptQueue actor: {a['calls_per_s']:.0f} lease/report round trips/s"]
    for s in result["training_runs"]:
        lines.append(f"- queue share of wall time in {s['run']}: {100 * s['queue_share']:.3f}%")
    return "\n".join(lines)
