"""`ada-ray bench soak`: a long async run under CPU contention, watching memory and leftovers.

Runs ada_seq_balance in async mode with two samplers for `steps` steps while `hog` extra
processes spin on the CPU, and samples every `interval` seconds the resident memory (RSS) of the
driver and of every actor process (PromptQueue, Sampler, Learner, and their reward workers). Reports
per process the RSS after warm-up (first quarter of the steps) and at the end, the growth between
them and the least-squares slope over the second half (MB per 100 steps), and after the run which
of the run's processes are still alive (there must be none). Also Ray's object store on this node (MB
used and objects held: the sample payloads live there, sampler.payload_transport = object_store) with
the same after-warm-up / end / slope figures: a run that keeps references to what it trained grows
there. Writes soak.json and soak_rss.png.
Actor processes are found by their titles (ray::Sampler, ...), below this process when it started the
cluster (any process on the host when it joined one: then run it alone on the host).
"""

from __future__ import annotations

import multiprocessing as mp
import re
import shutil
import threading
import time
from pathlib import Path

from ada_ray.bench.common import BATCH_PROMPTS, write_result
from ada_ray.config import load_config

ROLES = {"ray::PromptQueue": "queue", "ray::Sampler": "sampler", "ray::Learner": "learner"}
STEP_LINE = re.compile(r"^step (\d+)/")


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _name(proc) -> str:
    try:
        return proc.name()
    except Exception:  # noqa: BLE001 - gone
        return ""


def _role(proc) -> str | None:
    try:
        cmd = " ".join(proc.cmdline())
    except Exception:  # noqa: BLE001 - gone or not ours
        return None
    for prefix, role in ROLES.items():
        if cmd.startswith(prefix):
            return role
    return None


class RssSampler(threading.Thread):
    """Every `interval` s: (elapsed s, training step, {process label: RSS MB})."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval = interval
        self.step = 0
        self.samples: list[tuple[float, int, dict[str, float]]] = []
        self.store: list[tuple[int, float, int]] = []  # (step, object store MB used, objects held)
        self.pids: dict[int, str] = {}
        self._stop_evt = threading.Event()
        self.t0 = time.time()

    def snapshot(self) -> dict[str, float]:
        import psutil

        me = psutil.Process()
        out = {"driver": me.memory_info().rss / 2**20}
        mine = me.children(recursive=True)
        # a cluster this process started has its raylet below it: then only its own actors count (another
        # run on the host is not this one); a cluster it joined: every actor on the host
        own = any("raylet" in _name(c) for c in mine)
        for proc in (mine if own else psutil.process_iter()):
            role = _role(proc)
            if role is None:
                continue
            label = self.pids.setdefault(proc.pid, f"{role}:{proc.pid}")
            try:
                rss = proc.memory_info().rss
                if rss == 0:  # exiting (or a zombie): its memory is gone, a 0 MB sample would read as a drop
                    continue
                rss += sum(c.memory_info().rss for c in proc.children(recursive=True))  # reward workers
            except Exception:  # noqa: BLE001 - it exited between the listing and the read
                continue
            out[label] = rss / 2**20
        return out

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            self.samples.append((time.time() - self.t0, self.step, self.snapshot()))
            used = object_store_used()
            if used is not None:
                self.store.append((self.step, *used))

    def stop(self) -> None:
        self._stop_evt.set()
        self.join()


def object_store_used() -> tuple[float, int] | None:
    """(MB used, objects held) in the object store of the cluster this process is connected to; None when
    not connected (or this Ray has no such report: it is Ray's internal API)."""
    try:
        import ray
        from ray._private.internal_api import get_memory_info_reply
        from ray._private.state import state

        if not ray.is_initialized():
            return None
        st = get_memory_info_reply(state, timeout_seconds=10).store_stats
        return st.object_store_bytes_used / 2**20, int(st.num_local_objects)
    except Exception:  # noqa: BLE001 - a figure of the bench, never its failure
        return None


def analyse_store(points: list[tuple[int, float, int]], steps: int) -> dict:
    """The object store's MB and objects after warm-up, at the end, at most, and the objects' slope."""
    if not points:
        return {}
    warm = [p for p in points if p[0] >= steps // 4] or [points[-1]]
    late = [(s, float(n)) for s, _, n in points if s >= steps // 2]
    return {"mb_after_warmup": warm[0][1], "mb_end": points[-1][1], "mb_max": max(p[1] for p in points),
            "objects_after_warmup": warm[0][2], "objects_end": points[-1][2], "objects_max": max(p[2] for p in points),
            "objects_slope_per_100_steps": _slope(late), "samples": len(points)}


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares MB per 100 steps."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(s for s, _ in points) / n
    my = sum(r for _, r in points) / n
    den = sum((s - mx) ** 2 for s, _ in points)
    return 100.0 * sum((s - mx) * (r - my) for s, r in points) / den if den else 0.0


def analyse(samples: list[tuple[float, int, dict[str, float]]], steps: int) -> dict:
    labels = sorted({k for _, _, snap in samples for k in snap})
    out = {}
    for label in labels:
        series = [(step, snap[label]) for _, step, snap in samples if label in snap]
        if not series:
            continue
        warm = [r for s, r in series if s >= steps // 4] or [series[-1][1]]
        late = [(s, r) for s, r in series if s >= steps // 2]
        start, end = warm[0], series[-1][1]
        out[label] = {"rss_after_warmup_mb": start, "rss_end_mb": end, "rss_max_mb": max(r for _, r in series),
                      "growth_mb": end - start, "growth_pct": 100.0 * (end - start) / start if start else 0.0,
                      "slope_mb_per_100_steps": _slope(late), "samples": len(series)}
    return out


def _leftovers(pids: dict[int, str]) -> list[str]:
    import psutil

    left = []
    for pid, label in pids.items():
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(label)
        except psutil.NoSuchProcess:
            pass
    return left


def plot(samples, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({k for _, _, snap in samples for k in snap})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label in labels:
        pts = [(step, snap[label]) for _, step, snap in samples if label in snap]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("RSS (MB)")
    ax.set_title("soak: resident memory per process")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "soak_rss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run(steps: int = 300, out_dir: Path = Path("results"), smoke: bool = False, hog: int = 1,
        interval: float = 5.0, overrides: list[str] | None = None) -> dict:
    from ada_ray.driver.trainer import train

    if smoke:
        steps, interval = 6, 1.0
    work = out_dir / "soak_run"
    shutil.rmtree(work, ignore_errors=True)
    ov = [f"trainer.total_steps={steps}", "trainer.eval_every=0", "trainer.final_eval=false",
          "sampler.num_samplers=2", "trainer.ray_num_cpus=3", f"trainer.batch_prompts={BATCH_PROMPTS}", f"trainer.output_dir={work}",
          "trainer.run_name=soak", "tracking.enabled=false", "trainer.progress=plain", "trainer.save_every=0"] + list(overrides or [])
    cfg = load_config("ada_seq_balance", ov)
    watcher = RssSampler(interval)

    def log(line: str) -> None:
        m = STEP_LINE.match(line)
        if m:
            watcher.step = int(m.group(1))

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    hogs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(hog)]
    for h in hogs:
        h.start()
    t0 = time.time()
    watcher.start()
    try:
        code = train(cfg, log=log)
    finally:
        watcher.stop()
        stop.set()
        for h in hogs:
            h.join(timeout=10)
    wall = time.time() - t0
    time.sleep(3.0)  # actors are killed at shutdown; give the OS a moment to reap them
    left = _leftovers(watcher.pids)
    procs = analyse(watcher.samples, steps)
    result = {"steps": steps, "hog": hog, "interval_s": interval, "exit_code": code, "wall_s": wall,
              "processes": procs, "leftover_processes": left, "overrides": list(overrides or []),
              "object_store": analyse_store(watcher.store, steps),
              "max_growth_pct": max((p["growth_pct"] for p in procs.values()), default=0.0),
              "series": [{"t": round(t, 1), "step": s, "rss_mb": {k: round(v, 1) for k, v in snap.items()}}
                         for t, s, snap in watcher.samples]}
    out_dir.mkdir(parents=True, exist_ok=True)
    if watcher.samples:
        result["plot"] = str(plot(watcher.samples, out_dir))
    write_result(out_dir, "soak", result)
    return result


def format_table(result: dict) -> str:
    lines = [f"soak: {result['steps']} steps, {result['hog']} CPU hog(s), exit code {result['exit_code']}, "
             f"{result['wall_s']:.0f} s",
             "| process | RSS after warm-up (MB) | RSS at end (MB) | growth (MB) | growth % | slope (MB/100 steps, 2nd half) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, p in result["processes"].items():
        lines.append(f"| {label} | {p['rss_after_warmup_mb']:.0f} | {p['rss_end_mb']:.0f} | {p['growth_mb']:+.1f} | "
                     f"{p['growth_pct']:+.1f} | {p['slope_mb_per_100_steps']:+.2f} |")
    st = result.get("object_store") or {}
    if st:
        lines.append(f"object store: {st['mb_after_warmup']:.1f} MB / {st['objects_after_warmup']} objects after warm-up, "
                     f"{st['mb_end']:.1f} MB / {st['objects_end']} at the end, at most {st['mb_max']:.1f} MB / "
                     f"{st['objects_max']}; objects slope {st['objects_slope_per_100_steps']:+.1f} per 100 steps (2nd half)")
    lines.append(f"leftover processes after exit: {result['leftover_processes'] or 'none'}")
    return "\n".join(lines)
