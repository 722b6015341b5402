"""Give a bench's measured processes a CPU core of their own (`bench scale queue_cores=1`).

On a small machine the simulated samplers, the bench driver and Ray's own processes share the cores with the
PromptQueue: the queue then waits in the run queue as long as it runs, and its figures are the machine's
(BENCHMARKS: with 64 simulated samplers on 2 cores, a lease the queue answers at once took ~290 ms at the
median, ~5 ms with the queue on a core of its own). On a cluster the queue's node is not shared with the
samplers. `CorePin` pins every thread of the measured processes to the first core this process may use and
every other process of the bench (this one and its descendants: the local Ray cluster, its workers) to the
rest, and puts every one back on all of them when released. Linux only (sched_setaffinity); a thread or
process that ends meanwhile is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil


class CorePinError(RuntimeError):
    pass


def _set(pid: int, cores: set[int]) -> None:
    """Every thread of process `pid` on `cores` (a Linux affinity is a thread's, not a process's)."""
    try:
        threads = [t.id for t in psutil.Process(pid).threads()]
    except psutil.Error:
        return
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # the thread ended
            pass


class CorePin:
    """`measured` pids on a core of their own, the bench's other processes on the remaining cores."""

    def __init__(self, measured: Iterable[int]):
        self.all_cores = set(os.sched_getaffinity(0))
        if len(self.all_cores) < 2:
            raise CorePinError(f"bench scale queue_cores=1 needs 2 or more usable CPU cores, this process has "
                               f"{len(self.all_cores)}; run with queue_cores=0")
        first = min(self.all_cores)
        self.queue_cores, self.other_cores = {first}, self.all_cores - {first}
        self.measured = set(measured)
        me = psutil.Process()
        self.others = {p.pid for p in [me] + me.children(recursive=True)} - self.measured
        for pid in self.measured:
            _set(pid, self.queue_cores)
        for pid in self.others:
            _set(pid, self.other_cores)

    def describe(self) -> dict:
        return {"queue_cores": sorted(self.queue_cores), "other_cores": sorted(self.other_cores),
                "pinned_processes": len(self.measured) + len(self.others)}

    def release(self) -> None:
        """Every process pinned here, and any the bench started since, back on every core."""
        me = psutil.Process()
        for pid in self.measured | self.others | {p.pid for p in me.children(recursive=True)}:
            _set(pid, self.all_cores)
