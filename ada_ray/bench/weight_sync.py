"""`ada-ray bench sync`: WeightBus throughput against a single flat gloo broadcast of the same bytes
and against a local memory copy, for several bucket sizes and both packings, on the tiny policy's
state dict and on a synthetic ~500 MB one. Receivers are separate processes (spawned), as samplers are.
Each row also carries the cost model's seconds for it (`model_s`, from ada_ray/sync/cost_model.py).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from pathlib import Path

import torch

from ada_ray.bench.common import bar_chart, write_result
from ada_ray.sync.cost_model import GLOO_LOOPBACK, predict
from ada_ray.sync.weight_bus import WeightBusReceiver, WeightBusSender, _broadcast


def _receiver(port: int, rank: int, world: int, q_in, q_out) -> None:
    torch.set_num_threads(1)
    r = WeightBusReceiver("127.0.0.1", port, rank, world, "gloo", timeout_s=600)
    r.connect()
    while True:
        msg = q_in.get()
        if msg is None:
            break
        kind, payload = msg
        if kind == "bus":
            for _ in r.receive(payload):
                pass
        else:  # one flat tensor of `payload` float32 elements
            t = torch.empty(payload, dtype=torch.float32)
            _broadcast(r.pg, [t])
        q_out.put(rank)


def synthetic_state(total_mb: float, tensor_mb: float = 8.0) -> dict[str, torch.Tensor]:
    n = max(1, int(total_mb / tensor_mb))
    numel = int(tensor_mb * 1024 * 1024 / 4)
    return {f"layer{i}.weight": torch.randn(numel) for i in range(n)}


def tiny_state() -> dict[str, torch.Tensor]:
    from ada_ray.config import load_config
    from ada_ray.data.tiny_policy import build_model, build_tokenizer

    cfg = load_config()
    model = build_model(cfg.model.embedded, len(build_tokenizer()))
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(receivers: int = 2, big_mb: float = 512.0, buckets=(1.0, 16.0, 64.0, 256.0), repeats: int = 3,
        out_dir: Path = Path("results"), smoke: bool = False) -> dict:
    if smoke:
        big_mb, buckets, repeats = 16.0, (64.0,), 1
    ctx = mp.get_context("spawn")
    world = receivers + 1
    payloads = {"tiny_policy": tiny_state(), f"synthetic_{int(big_mb)}mb": synthetic_state(big_mb)}
    rows = []
    for name, state in payloads.items():
        sizes = [t.numel() * t.element_size() for t in state.values()]
        nbytes = sum(sizes)
        mb = nbytes / 1e6
        memcpy = _time(lambda: [t.clone() for t in state.values()], repeats)
        for packing in ("per_tensor", "flat", "hybrid"):
            for bucket in buckets:
                sender = WeightBusSender(world, "gloo", "127.0.0.1", bucket_mb=bucket, packing=packing, timeout_s=600)
                qs_in = [ctx.Queue() for _ in range(receivers)]
                q_out = ctx.Queue()
                procs = [ctx.Process(target=_receiver, args=(sender.port, r + 1, world, qs_in[r], q_out))
                         for r in range(receivers)]
                for p in procs:
                    p.start()
                sender.connect()
                meta = sender.meta(state.items(), 1)

                def bus_update():
                    for q in qs_in:
                        q.put(("bus", meta))
                    sender.send(state.items(), meta)
                    for _ in range(receivers):
                        q_out.get()

                flat_src = torch.cat([t.reshape(-1).float() for t in state.values()])

                def flat_broadcast():
                    for q in qs_in:
                        q.put(("flat", flat_src.numel()))
                    _broadcast(sender.pg, [flat_src])
                    for _ in range(receivers):
                        q_out.get()

                bus_update()  # warm-up (connections, allocations)
                t_bus = _time(bus_update, repeats)
                t_flat = _time(flat_broadcast, repeats)
                for q in qs_in:
                    q.put(None)
                for p in procs:
                    p.join(timeout=60)
                sender.close()
                # the cost model's seconds for this row (gloo's binomial tree; flattening at this memcpy rate)
                model = predict(sizes, receivers, sender.bucket_bytes, GLOO_LOOPBACK, "tree", packing,
                                copy_bw=nbytes / memcpy).total_s
                rows.append({"payload": name, "mb": round(mb, 2), "packing": packing, "bucket_mb": bucket,
                             "buckets": len(meta["buckets"]), "bus_s": t_bus, "bus_mb_s": mb / t_bus,
                             "flat_broadcast_s": t_flat, "flat_mb_s": mb / t_flat,
                             "bus_vs_flat": t_flat / t_bus, "memcpy_s": memcpy, "memcpy_mb_s": mb / memcpy,
                             "model_s": model})
    tiny = [r for r in rows if r["payload"] == "tiny_policy"]
    result = {"receivers": receivers, "repeats": repeats, "rows": rows,
              "tiny_policy_best_update_ms": 1000 * min(r["bus_s"] for r in tiny)}
    write_result(out_dir, "sync", result)
    bar_chart(out_dir / "sync.png", f"weight broadcast to {receivers} receivers (gloo)", "MB/s",
              {f"{r['payload']} {r['packing']} {r['bucket_mb']:g}MB": {
                  "WeightBus": r["bus_mb_s"], "one flat broadcast": r["flat_mb_s"], "memcpy": r["memcpy_mb_s"]}
               for r in rows})
    return result


def format_table(result: dict) -> str:
    lines = ["| payload | MB | packing | bucket MB | buckets | bus MB/s | flat bcast MB/s | bus / flat | memcpy MB/s "
             "| update ms | model ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        lines.append(f"| {r['payload']} | {r['mb']:.1f} | {r['packing']} | {r['bucket_mb']:g} | {r['buckets']} | "
                     f"{r['bus_mb_s']:.0f} | {r['flat_mb_s']:.0f} | {r['bus_vs_flat']:.2f} | {r['memcpy_mb_s']:.0f} | "
                     f"{1000 * r['bus_s']:.0f} | {1000 * r['model_s']:.0f} |")
    return "\n".join(lines)
