"""`ada-ray bench scale`: the real PromptQueue at cluster scale, with simulated samplers.

For every (S samplers, P prompts, K queue shards) row: a real PromptQueue actor (real Ray; K > 1: K shards
and their coordinator, built by `build_queue` as the Runtime builds them, sampler i on shard i % K) serves P
synthetic prompts (each with a known pass rate, which also seeds the queue's difficulty memory, so that
memory holds all P prompts from the start); S simulated samplers, hosted as asyncio tasks in a few Ray actors (`SimSamplers`:
256 sampler processes would not fit a small machine), lease work, "generate" by sleeping a drawn service
time (exponential, capped at 4x its mean), and report synthetic samples whose rewards are Bernoulli(pass
rate); the bench process plays the driver (wait for cohort c, check it, set version c + 1).

The batch grows with the fan-out (`prompts_per_sampler` x S prompts a step, at least `batch`): a cluster
of 256 samplers runs larger steps than one of 8, and a fixed small batch would leave most samplers idle
(the cohort pipeline, not the queue, would set the rate). Samplers lease as the real sampler does
(`leases=ride`, sampler.leases_ride_reports): each report call carries the sampler's next ask, which the
queue answers as a lease call (ready work at once, else a wait in line up to LeaseFeeder.lease_wait_s);
a lease call of its own only for the first ask and after a pause that followed an empty answer (a
simulated sampler reports its whole lease at once, so every ask of its rides; a real one's rides while
its engine is at least half full, and only on direct calls: with `relays=1` this measures what riding
would cost through a relay, which the sampler does not do, queue_relay.asks_ride_reports).
`leases=feeder`: every ask a lease call of its own (the feeder with sampler.leases_ride_reports = false),
a pause after an empty answer; `leases=probe`: this bench's earlier pattern (an ask answered at once,
then a long poll when it came back empty: two calls where the feeder makes one).

`queue_cores=1` runs a row with the queue's process(es) on a core of their own and every other process of
the bench on the rest, as on a cluster whose queue node is not shared with samplers (core_pin.py);
`queue_cores=0,1` runs both, side by side.

`finish=engine` shapes each simulated sampler as the real one instead (items finishing one by one, a
report every engine step or every `report_intervals` ms: sampler.report_interval_s; scale_sims.py).

Recorded per pair: work items served per second, lease and report latency p50/p99 (as the samplers see
them; a lease's: feeder and ride, the round trip of a call that brought work, any wait for work included
(ride: a report's too, the combined call's); probe,
the asking call's, answered at once), the round trip of a lease the queue answers at once (`lease_answer_*`: a
probe in a process of its own asking for no work every PROBE_EVERY_S the way the row's samplers reach the
queue, i.e. what a sampler whose work is ready waits, without the wait for work; `probe=queue`: the queue
itself even where the samplers use relays, the queue's own answer time without the relay's hop), the queue process's CPU share, its memory per prompt (RSS after loading P prompts minus RSS after
loading one batch, over the difference in prompts), the driver's wait per cohort, and two checks:
admission control (every trained sample came from a policy version >= cohort - max_staleness) and the
accounting invariant after the queue stops. Each row runs with each payload transport asked for
(`transports`): inline (token ids and log-probs of every sample inside the report, through the queue)
and object_store (one `ray.put` batch a report, the queue gets metadata and the batch's ref: the
default, sampler.payload_transport; each item's metadata one SampleBlock of columns, as the sampler
reports it), and object_store_samples (the same with one Sample object a sample: the report before
SampleBlock, for a before/after in one run); `completion_tokens` sets a sample's size (8: the embedded task;
~1-2k: a 1.5B model's math answers, ~16 KB a sample). Once per run: Ray's floor, the CPU a no-op async actor call
costs the serving process (with 0 and 64 items as its argument: as one Sample a sample, as the samplers
report now, and as numpy columns; and 64 work items as its answer, as objects and as numpy columns), the
part of the queue's cost that no queue code can remove.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Optional

import ray

from ada_ray.actors.ray_payloads import OWNERS_NAMESPACE, owner_actor_name
from ada_ray.bench.common import COMPLETION_TOKENS, PROMPT_TOKENS, write_result
from ada_ray.bench.core_pin import CorePin
from ada_ray.bench.ray_floor import format_floor, ray_call_floor
from ada_ray.bench.scale_sims import SimSamplers, pass_rate
from ada_ray.config import load_config, to_dict

def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _queue_config(batch: int, max_staleness: int, overrides: Optional[list[str]] = None):
    return load_config("ada_seq_balance", [f"trainer.batch_prompts={batch}", f"trainer.max_staleness={max_staleness}",
                                           "trainer.total_steps=1000000000", "algo.prior_weight=4",
                                           "sampler.lease_timeout_s=600"] + list(overrides or []))


def make_prompt_source(prompts: int, folder: Path):
    """A prompt table of `prompts` synthetic prompts, written once per size and reused."""
    from ada_ray.data.prompt_table import PromptTable, synthetic_table

    path = folder / f"synthetic_{prompts}.arrow"
    if not path.exists():
        synthetic_table(path, prompts, PROMPT_TOKENS, pass_rate)
    return PromptTable.open(path)


PROBE_EVERY_S = 0.1  # how often the lease probe asks (10 no-op calls a second at Ray's ~0.5 ms: ~0.5% of a core)


@ray.remote(num_cpus=0, max_concurrency=2)
class _ProbeActor:
    """The lease probe's process: a caller of its own, as a sampler is (in the bench process it would wait
    on that process's work, e.g. taking each cohort: BENCHMARKS, "A lease answered at once")."""

    def __init__(self):
        self._stop = threading.Event()

    def run(self, target) -> list[tuple[float, float]]:
        self._stop.clear()
        rtts = []  # (wall clock at the call, round trip s)
        while not self._stop.wait(PROBE_EVERY_S):
            w, t0 = time.time(), time.perf_counter()
            ray.get(target.lease.remote("lease-probe", 0, None, 0.0), timeout=120)
            rtts.append((w, time.perf_counter() - t0))
        return rtts

    def stop(self) -> None:
        self._stop.set()

    def ready(self) -> bool:
        return True


class LeaseProbe:
    """Asks `target` (the queue, or the relay a row's samplers reach it through) for no work every
    PROBE_EVERY_S, from a process of its own: the queue answers such a lease at once, so its round trip is
    what a sampler whose work is ready waits - the queue's responsiveness under load, without the wait for
    work a sampler's long poll includes (a row's lease_p99_ms)."""

    def __init__(self, target, actor=None):
        """`actor`: a probe process to reuse (new_probe_actor; a run's rows share one), else one of its own."""
        self.owned = actor is None
        self.actor = new_probe_actor() if actor is None else actor
        self._run = self.actor.run.remote(target)

    def stop(self) -> list[tuple[float, float]]:
        ray.get(self.actor.stop.remote(), timeout=60)
        rtts = ray.get(self._run, timeout=180)
        if self.owned:
            ray.kill(self.actor)
        return rtts


def new_probe_actor():
    """A lease probe's process, started (the first probe of a row comes at once, not after a worker starts)."""
    actor = _ProbeActor.remote()
    ray.get(actor.ready.remote(), timeout=300)
    return actor


def _kill(queue, shard_handles: list) -> None:
    for h in [queue] + [x for x in shard_handles if x is not queue]:
        ray.kill(h)


def run_pair(samplers: int, prompts: int, *, folder: Path, duration_s: float, service_ms: float, hosts: int,
             max_items: int, batch: int, max_staleness: int, shards: int = 1, seed: int = 0,
             transport: str = "inline", completion_tokens: int = COMPLETION_TOKENS, relay: bool = False,
             lease_mode: str = "ride", finish: str = "together", step_ms: float = 20.0,
             report_interval_ms: float = 0.0, queue_core: bool = False, probe_actor=None,
             probe_via: str = "relay") -> dict:
    """One (S, P, K) row: K queue shards (K = 1: the single PromptQueue) built as the Runtime builds them;
    `relay`: each sampler host reaches them through its own QueueRelays (one a shard), as a node's
    samplers do with sampler.queue_relay (a host stands for a node); `queue_core`: the shards on a core
    of their own while the row is measured, every other process of the bench on the others (core_pin.py);
    `probe_actor`: the lease probe's process to reuse (LeaseProbe); `probe_via`: "relay", the probe asks
    the way the row's samplers do (through the first host's relay when they use relays), or "queue", it
    asks the queue (shard 0) itself - the queue's own answer time, without the relay's hop."""
    from ada_ray.actors.queue_coordinator import build_queue
    from ada_ray.actors.queue_relay import QueueRelay

    if finish == "engine":
        lease_mode = _engine_lease_mode(lease_mode, relay)

    cfg = to_dict(_queue_config(batch, max_staleness))
    opts = {"num_cpus": 0, "max_concurrency": 1000}
    # baseline: the same queue(s) holding two batches of prompts (interpreter, Ray workers, code, the steps in
    # flight), their open steps' work leased, as the measured queue's work in flight is at the end of a run
    base_n = min(prompts, 2 * batch)
    small, small_shards = build_queue(make_prompt_source(base_n, folder), cfg, shards=shards, options=opts)
    ray.get([h.lease.remote("baseline", 1 << 30, None, 0.0) for h in small_shards], timeout=600)
    base = ray.get(small.resources.remote(), timeout=600)
    _kill(small, small_shards)
    t0 = time.perf_counter()
    q, shard_handles = build_queue(make_prompt_source(prompts, folder), cfg, shards=shards, options=opts)
    ray.get(q.resources.remote(), timeout=1800)
    load_s = time.perf_counter() - t0
    per_host = [samplers // hosts + (1 if i < samplers % hosts else 0) for i in range(hosts)]
    relays = [[QueueRelay.options(num_cpus=0).remote(h, f"host {i} shard {k}") for k, h in enumerate(shard_handles)]
              if relay else [] for i in range(hosts)]
    owners = [owner_actor_name(f"sim-host-{i}") for i in range(hosts)]  # a host's simulated samplers share its store
    sims = [SimSamplers.options(name=owners[i], namespace=OWNERS_NAMESPACE).remote(
        relays[i] or shard_handles, sum(per_host[:i]), n, service_ms, max_items, seed + i, transport, completion_tokens,
        owners[i], max_staleness, lease_mode, finish, step_ms, report_interval_ms)
            for i, n in enumerate(per_host) if n > 0]
    runs = [s.run.remote() for s in sims]
    waits: list[float] = []
    steady_from = float("inf")
    stale_violations = 0
    groups = 0
    step = 0
    via_relay = relay and probe_via == "relay"
    probe = LeaseProbe(relays[0][0] if via_relay else shard_handles[0], probe_actor)
    pin = CorePin([r["pid"] for r in ray.get([h.resources.remote() for h in shard_handles], timeout=60)]
                  ) if queue_core else None
    try:
        cpu0 = ray.get(q.resources.remote(), timeout=60)
        t_start = time.perf_counter()
        while time.perf_counter() - t_start < duration_s:
            w0 = time.perf_counter()
            res = ray.get(q.wait_cohort.remote(step, 120.0), timeout=180)
            if not hasattr(res, "groups"):
                raise RuntimeError(f"bench scale: cohort {step} did not come ({res})")
            waits.append(time.perf_counter() - w0)
            if step == 0:
                steady_from = time.time()  # the first cohort is in: every sampler has had its first lease
            for g in res.groups:
                groups += 1
                stale_violations += sum(1 for s in g.samples if s.version < step - max_staleness)
            step += 1
            ray.get(q.set_version.remote(step), timeout=60)
        elapsed = time.perf_counter() - t_start
        cpu1 = ray.get(q.resources.remote(), timeout=60)
    finally:
        if pin is not None:
            pin.release()
    rtts = probe.stop()
    probed = [d for w, d in rtts if w >= steady_from] or [d for _, d in rtts]
    stats0 = ray.get(q.stats.remote(), timeout=60)
    relay_stats = ray.get([r.stats.remote() for rs in relays for r in rs], timeout=60)
    for s in sims:
        s.stop.remote()
    accounting = ray.get(q.stop.remote(), timeout=120)
    outs = ray.get(runs, timeout=300)
    for s in sims:
        ray.kill(s)
    for r in (r for rs in relays for r in rs):
        ray.kill(r)
    _kill(q, shard_handles)
    # latencies in steady state: calls made after the first cohort was taken (the start, when every sampler
    # asks at once and the first cohorts open, is reported apart as lease_p99_all_ms)
    lease_all = [d for o in outs for _, d in o["lease_s"]]
    lease = [d for o in outs for w, d in o["lease_s"] if w >= steady_from] or lease_all
    report = [d for o in outs for w, d in o["report_s"] if w >= steady_from] or [d for o in outs for _, d in o["report_s"]]
    served = sum(o["served"] for o in outs)
    issued = accounting["issued"]
    return {
        "samplers": samplers, "prompts": prompts, "shards": shards, "transport": transport, "relay": relay,
        "lease_mode": lease_mode, "finish": finish,
        "queue_core": pin.describe() if pin is not None else None,
        "step_ms": step_ms if finish == "engine" else None,
        "report_interval_ms": report_interval_ms if finish == "engine" else None,
        "completion_tokens": completion_tokens, "hosts": len(sims), "seconds": elapsed, "steps": step,
        "groups_trained": groups, "items_issued": issued, "items_reported": served,
        "items_per_s": served / elapsed,
        "lease_p50_ms": 1000 * percentile(lease, 0.5), "lease_p99_ms": 1000 * percentile(lease, 0.99),
        "lease_p99_all_ms": 1000 * percentile(lease_all, 0.99),
        # a lease answered at once (LeaseProbe), in steady state: what a sampler whose work is ready waits
        "lease_answer_p50_ms": 1000 * percentile(probed, 0.5), "lease_answer_p99_ms": 1000 * percentile(probed, 0.99),
        "lease_probes": len(probed), "probe_via": "relay" if via_relay else "queue",
        "report_p50_ms": 1000 * percentile(report, 0.5), "report_p99_ms": 1000 * percentile(report, 0.99),
        "batch": batch, "lease_calls": sum(o["lease_calls"] for o in outs), "empty_leases": sum(o["empty_leases"] for o in outs),
        "asks_on_reports": sum(o["asks_on_reports"] for o in outs),
        "report_calls": sum(o["report_calls"] for o in outs),
        "items_per_report_call": served / max(1, sum(o["report_calls"] for o in outs)),
        "long_polls": sum(o["polls"] for o in outs),
        "queue_cpu_share": (cpu1["cpu_s"] - cpu0["cpu_s"]) / elapsed,
        # the queue's CPU cost per item served (its capacity on one core is 1e6 / this)
        "queue_us_per_item": 1e6 * (cpu1["cpu_s"] - cpu0["cpu_s"]) / max(1, served),
        "queue_rss_mb": cpu1["rss_mb"], "queue_anon_mb": cpu1["anon_mb"], "load_s": load_s,
        # what the queue owns per prompt (anonymous memory: ids, index, difficulty memory), at the end of the run
        "bytes_per_prompt": (cpu1["anon_mb"] - base["anon_mb"]) * 2**20 / max(1, prompts - base_n),
        # the same with the prompt table's pages the run touched (page cache shared with the OS, reclaimable)
        "rss_bytes_per_prompt": (cpu1["rss_mb"] - base["rss_mb"]) * 2**20 / max(1, prompts - base_n),
        "cohort_wait_p50_ms": 1000 * percentile(waits, 0.5), "cohort_wait_max_ms": 1000 * max(waits, default=0.0),
        "stale_samples": stale_violations, "accounting_ok": bool(accounting["items_ok"] and accounting["prompts_ok"]),
        "queue_stats": stats0,
        # what the relays combined: sampler calls a queue call (leases: the samplers' asks over the plain calls
        # and long polls together; a waiting ask goes out again in each long poll, so this can be < 1)
        "relay_asks_per_call": (sum(r["asks"] for r in relay_stats)
                                / max(1, sum(r["lease_calls"] + r["poll_calls"] for r in relay_stats))) if relay else None,
        "relay_reports_per_call": (sum(r["reports"] for r in relay_stats)
                                   / max(1, sum(r["report_calls"] for r in relay_stats))) if relay else None,
    }


DRIVER_LOAD = """
import json, resource, sys, time
from pathlib import Path
from ada_ray.config import DataConfig
from ada_ray.data.datasets import load_splits
from ada_ray.data.shipped_policy import SHIPPED_DIR
from transformers import AutoTokenizer

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

path, cache, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(str(SHIPPED_DIR))
before = rss_mb()
t0 = time.perf_counter()
train, _ = load_splits(DataConfig(source="parquet", train_path=path, max_prompt_tokens=64), tok,
                       table_cache=Path(cache) if mode == "table" else None, log=lambda m: None)
seconds = time.perf_counter() - t0
print(json.dumps({"rows": len(train.prompts), "seconds": seconds, "rss_before_mb": before, "rss_after_mb": rss_mb(),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def driver_load(rows: int, folder: Path, mode: str = "table") -> dict:
    """Stream a `rows`-row Parquet file into a prompt table in a fresh process (the driver's part of
    starting a run): its peak and final RSS, and the seconds it took (tokenizing included). mode
    "list" loads the prompts into a Python list instead (what the driver did before the table)."""
    import json
    import shutil
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / f"driver_{rows}.parquet"
    if not path.exists():
        writer = None
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            t = pa.table({"question": [f"{i % 97}+{i // 97 % 89}-{i % 13}= #{i}" for i in range(start, start + n)],
                          "answer": [str(i % 97 + i // 97 % 89 - i % 13) for i in range(start, start + n)]})
            writer = writer or pq.ParquetWriter(path, t.schema)
            writer.write_table(t)
        writer.close()
    cache = folder / f"driver_cache_{rows}"
    shutil.rmtree(cache, ignore_errors=True)
    out = subprocess.run([sys.executable, "-c", DRIVER_LOAD, str(path), str(cache), mode], capture_output=True, text=True,
                         timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"bench scale: driver load of {rows} rows failed: {out.stderr[-2000:]}")
    shutil.rmtree(cache, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(out_dir: Path = Path("results"), smoke: bool = False, samplers: str = "8,64,256",
        prompts: str = "10000,100000,1000000", duration: float = 20.0, service_ms: float = 20.0, hosts: int = 2,
        max_items: int = 64, batch: int = 512, prompts_per_sampler: int = 16, shards: str = "1",
        seed: int = 0, transports: str = "inline,object_store", completion_tokens: int = COMPLETION_TOKENS,
        relays: str = "0", leases: str = "ride", finish: str = "together", step_ms: float = 20.0,
        report_intervals: str = "0", queue_cores: str = "0", probe: str = "relay") -> dict:
    from ada_ray.driver import cluster as cl

    if smoke:
        samplers, prompts, duration, hosts, batch, shards, relays = "4,16", "2000", 3.0, 2, 64, "1,2", "0,1"
    s_list = [int(x) for x in str(samplers).split(",")]
    p_list = [int(x) for x in str(prompts).split(",")]
    k_list = [int(x) for x in str(shards).split(",")]
    qc_list = [_flag("queue_cores", x) for x in str(queue_cores).split(",")]
    if probe not in ("relay", "queue"):
        raise ValueError(f"bench scale probe: expected relay or queue, got {probe!r}")
    folder = out_dir / "scale_data"
    folder.mkdir(parents=True, exist_ok=True)
    loads = [{"rows_asked": p, **driver_load(p, folder)} for p in p_list]
    for r in loads:
        print(f"driver: {r['rows']:,} rows streamed into a prompt table in {r['seconds']:.1f}s, RSS "
              f"{r['rss_before_mb']:.0f} -> {r['rss_after_mb']:.0f} MB (peak {r['peak_rss_mb']:.0f})",
              file=sys.stderr, flush=True)
    if len(p_list) > 1 and max(p_list) >= 100_000:  # what the driver held before the table: a list of Prompts
        loads.append({"rows_asked": max(p_list), "mode": "list", **driver_load(max(p_list), folder, "list")})
    c = cl.connect(load_config("default", [f"trainer.ray_num_cpus={max(2, hosts + 1)}"]))
    rows = []
    probe_actor = None
    try:
        probe_actor = new_probe_actor()
        floor = ray_call_floor(calls=400 if smoke else 1200)
        for f in floor:
            print(format_floor(f), file=sys.stderr, flush=True)
        for p in p_list:
            for s in s_list:
                for k in k_list:
                    # side by side in one run: machine drift hits every variant alike
                    for tr, rl, lm, fm, ri in _variants(transports, relays, leases, finish, report_intervals):
                        for qc in qc_list:
                            rows.append(run_pair(s, p, folder=folder, duration_s=duration, service_ms=service_ms,
                                                 hosts=hosts, max_items=max_items,
                                                 batch=min(p, max(batch, prompts_per_sampler * s)), max_staleness=2,
                                                 shards=k, seed=seed, transport=tr, completion_tokens=completion_tokens,
                                                 relay=rl not in _OFF, lease_mode=lm, finish=fm,
                                                 step_ms=step_ms, report_interval_ms=ri, queue_core=qc,
                                                 probe_actor=probe_actor, probe_via=probe))
                            print(format_row(rows[-1]), file=sys.stderr, flush=True)  # progress; the table: stdout
    finally:
        if probe_actor is not None:
            ray.kill(probe_actor)
        c.shutdown()
    result = {"params": {"duration_s": duration, "service_ms": service_ms, "hosts": hosts, "max_items": max_items,
                         "shards": k_list, "batch": batch, "prompts_per_sampler": prompts_per_sampler, "max_staleness": 2, "prompt_tokens": PROMPT_TOKENS,
                         "completion_tokens": completion_tokens, "transports": transports.split(","),
                         "relays": str(relays).split(","), "leases": leases.split(","),
                         "finish": str(finish).split(","), "step_ms": step_ms,
                         "report_intervals_ms": [float(x) for x in str(report_intervals).split(",")],
                         "queue_cores": qc_list, "probe": probe,
                         "algo": "ada_seq_balance"},
              "rows": rows, "driver_load": loads, "ray_call_floor": floor}
    write_result(out_dir, "scale", result)
    chart(out_dir / "scale.png", rows)
    return result


def _engine_lease_mode(lease_mode: str, relay: bool) -> str:
    """An engine-shaped sampler's asks: riding its reports (`ride`) or the feeder's own calls; never riding
    through a relay, as the real sampler's (queue_relay.asks_ride_reports)."""
    return "ride" if lease_mode == "ride" and not relay else "feeder"


_OFF = ("0", "off", "false")  # a variant list's "no" (relays, queue_cores)


def _flag(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _OFF:
        return False
    if v in ("1", "on", "true"):
        return True
    raise ValueError(f"bench scale {name}: expected 0 or 1 (a comma-separated list of them), got {value!r}")


def _variants(transports: str, relays: str, leases: str, finish: str, report_intervals: str) -> list[tuple]:
    """Every (transport, relay, lease mode, finish, report interval ms) row of one (S, P, K). The report
    intervals are the `engine` shape's (a `together` sampler reports each lease at once); an `engine`
    sampler's asks ride its reports (`ride`) or not (`feeder`), and never through a relay, as the real
    sampler's (queue_relay.asks_ride_reports)."""
    out = []
    for tr in transports.split(","):
        for rl in str(relays).split(","):
            relayed = rl not in _OFF
            for fm in str(finish).split(","):
                if fm == "together":
                    out += [(tr, rl, lm, fm, 0.0) for lm in leases.split(",")]
                    continue
                modes = list(dict.fromkeys(_engine_lease_mode(lm, relayed) for lm in leases.split(",")))
                out += [(tr, rl, lm, fm, float(ri)) for lm in modes for ri in str(report_intervals).split(",")]
    return out


def chart(path: Path, rows: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    sizes = sorted({r["prompts"] for r in rows})
    transports = sorted({r.get("transport", "inline") for r in rows})
    for p, k, tr, rl in sorted({(r["prompts"], r.get("shards", 1), r.get("transport", "inline"), bool(r.get("relay")))
                                for r in rows}):
        rs = sorted((r for r in rows if r["prompts"] == p and r.get("shards", 1) == k
                     and r.get("transport", "inline") == tr and bool(r.get("relay")) == rl), key=lambda r: r["samplers"])
        xs = [r["samplers"] for r in rs]
        style = dict(color=f"C{sizes.index(p) + (3 if rl else 0)}", marker="^" if rl else "o" if k == 1 else "s",
                     ls={"inline": ":", "object_store_samples": "-."}.get(tr, "-") if k == 1 else "--",
                     label=f"P={p:,}" + (f", {k} shards" if k > 1 else "") + (f", {tr}" if len(transports) > 1 else "")
                     + (", relays" if rl else ""))
        axes[0].plot(xs, [r["items_per_s"] for r in rs], **style)
        axes[1].plot(xs, [r["lease_p99_ms"] for r in rs], **style)
        if k == 1 and tr == transports[-1] and not rl:  # the smallest step's row: the least in-flight state on top of the per-prompt cost
            axes[2].bar(f"{p:,}", min(r["bytes_per_prompt"] for r in rs), color=f"C{sizes.index(p)}")
    axes[0].set(xscale="log", xlabel="simulated samplers", ylabel="work items / s", title="served")
    axes[1].set(xscale="log", xlabel="simulated samplers", ylabel="ms", title="lease latency p99")
    axes[1].axhline(50, color="gray", ls="--", lw=0.8)
    axes[2].set(yscale="log", xlabel="prompts", ylabel="bytes", title="queue memory per prompt (1 queue)")
    axes[2].axhline(1024, color="gray", ls="--", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_row(r: dict) -> str:
    return (f"S={r['samplers']:>4} P={r['prompts']:>8,} K={r.get('shards', 1)} {r.get('transport', 'inline'):>12}"
            f"{' relay' if r.get('relay') else ''}{' queue-core' if r.get('queue_core') else ''}{' ' + r['lease_mode'] if r.get('lease_mode', 'feeder') != 'feeder' else ''}"
            + (f" engine (report every {r['report_interval_ms']:g} ms)" if r.get("finish") == "engine" else "") + ": "
            f"{r['items_per_s']:8.0f} items/s, "
            + (f"{r['items_per_report_call']:.1f} items a report call, " if "items_per_report_call" in r else "") +
            "lease p50/p99 "
            f"{r['lease_p50_ms']:.1f}/{r['lease_p99_ms']:.1f} ms"
            + (f" (answered at once {r['lease_answer_p50_ms']:.1f}/{r['lease_answer_p99_ms']:.1f}"
               f"{', asked of the queue itself' if r.get('relay') and r.get('probe_via') == 'queue' else ''})"
               if "lease_answer_p99_ms" in r else "") +
            f", report p50/p99 {r['report_p50_ms']:.1f}/"
            f"{r['report_p99_ms']:.1f} ms, queue CPU {100 * r['queue_cpu_share']:.0f}% ({r['queue_us_per_item']:.0f} us/item), "
            f"{r['bytes_per_prompt']:.0f} B/prompt, cohort wait p50 {r['cohort_wait_p50_ms']:.0f} ms, "
            f"stale {r['stale_samples']}, accounting {'ok' if r['accounting_ok'] else 'BROKEN'}"
            + (f", relay: {r['relay_asks_per_call']:.1f} asks / {r['relay_reports_per_call']:.1f} reports a queue call"
               if r.get("relay") else ""))


def format_table(result: dict) -> str:
    lines = [format_row(r) for r in result["rows"]] + [format_floor(f) for f in result.get("ray_call_floor", [])]
    lines += [f"driver ({r.get('mode', 'table')}): {r['rows']:,} rows in {r['seconds']:.1f}s, RSS {r['rss_before_mb']:.0f} -> "
              f"{r['rss_after_mb']:.0f} MB, peak {r['peak_rss_mb']:.0f} MB" for r in result.get("driver_load", [])]
    return "\n".join(lines)
