"""Weight-bus cost model (issue 13 §3): the seconds of one weight update, learner rank 0 -> S samplers.

Pure Python (no torch, no Ray). It mirrors what `ada_ray.sync.weight_bus` does - greedy buckets,
packings per_tensor / flat / hybrid, the buckets one after another - and adds the terms around the
broadcast: ZeRO-3's per-bucket all-gather on the learners, host staging (gloo moves host memory, so
GPU tensors go device -> host -> device), the sender's concatenation for flat packing, and the
receiver's load into vLLM. Every stage of a bucket runs after the previous one, as in the code, so the
total is their sum; `overlapped_s` is what a double-buffered bus would approach.

A prediction, not a measurement: the NVLink / InfiniBand / PCIe / HBM figures are vendor peaks, so a
prediction with them is a lower bound. Calibration and checks: BENCHMARKS.md, "Weight-bus cost model".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MiB = 1 << 20
SMALL_TENSOR_BYTES = MiB  # hybrid packing: tensors below this travel flattened (as in weight_bus)


@dataclass(frozen=True)
class Link:
    """A transport as one rank sees it.

    bandwidth    bytes/s, one direction, per rank (what one send can use);
    latency      seconds per message per step (a step: one hop of a ring, one round of a tree);
    streams      messages that travel at once (gloo: its worker threads; NCCL: 1, a communicator's
                 collectives run one after another on its stream);
    chunk_bytes  bytes per pipeline step of the ring algorithm.
    """
    name: str
    bandwidth: float
    latency: float
    streams: int = 1
    chunk_bytes: int = 4 * MiB
    source: str = ""


# Vendor figures (peak, per direction). Latencies: NCCL's own tuning table (src/graph/tuning.cc,
# hwLat, Ring / Simple protocol: NVLink 3.4 us, network 14 us per step). Chunk: NCCL_BUFFSIZE's
# default, 4 MiB (NCCL splits it into 8 steps per channel, but channels run in parallel).
NVLINK4 = Link("NVLink 4 (H100/H200 SXM)", 450e9, 3.4e-6,
               source="vendor: 900 GB/s bidirectional per GPU = 450 GB/s per direction")
IB_NDR = Link("NDR InfiniBand, one 400 Gb/s NIC", 50e9, 14e-6,
              source="vendor: 400 Gb/s = 50 GB/s per NIC per direction")
# Measured here (BENCHMARKS.md "Weight broadcast", 2-core AMD EPYC, 2 receivers): one flat gloo
# broadcast of 537 MB took 0.975 s = 2 binomial-tree rounds -> 1.10 GB/s per round; the tiny policy
# at flat 1 MB buckets (16 ms for 4 buckets) leaves 0.75 ms per message per round; gloo's default
# 2 worker threads (ProcessGroupGloo _Options._threads) carry two messages at once - a term the
# 1-receiver run refuted (one-tensor buckets were as fast; small messages are what is fast), kept as
# committed before that run; see BENCHMARKS.md. Loopback figures are per machine.
GLOO_LOOPBACK = Link("gloo over TCP loopback (2-core CPU machine)", 1.10e9, 0.75e-3, streams=2, chunk_bytes=1 << 62,
                     source="measured here: bench sync, 2 receivers")

PCIE5_X16 = 64e9  # bytes/s per direction, vendor (PCIe Gen5 x16): device <-> host staging, peak
HBM_COPY = 3.35e12 / 2  # bytes/s: a device copy reads and writes; H100 SXM HBM3 3.35 TB/s, vendor
LOAD_PER_TENSOR_S = 3e-4  # s per tensor into vLLM on GPU: upper bound from SkyRL #487 (6 s, ~18.9k tensors)
FIXED_S = 0.1  # s per update: control message + vLLM reload bookkeeping; measured here on CPU (see BENCHMARKS)


def uniform(total_bytes: float, n_tensors: int) -> list[int]:
    """`n_tensors` tensors of equal size adding up to `total_bytes` (a model known only by size)."""
    return [int(total_bytes // n_tensors)] * n_tensors


def plan_buckets(tensor_bytes: list[int], bucket_bytes: int) -> list[list[int]]:
    """weight_bus.plan_buckets on sizes: greedy, in order; a tensor larger than a bucket goes alone."""
    buckets: list[list[int]] = []
    cur: list[int] = []
    for n in tensor_bytes:
        if cur and sum(cur) + n > bucket_bytes:
            buckets.append(cur)
            cur = []
        cur.append(n)
    if cur:
        buckets.append(cur)
    return buckets


def messages(bucket: list[int], packing: str) -> tuple[list[int], int]:
    """(sizes of the broadcasts a bucket becomes, bytes the sender copies to flatten), one dtype assumed."""
    if packing == "per_tensor":
        return list(bucket), 0
    if packing == "flat":
        return [sum(bucket)], (sum(bucket) if len(bucket) > 1 else 0)
    if packing == "hybrid":
        small = [n for n in bucket if n < SMALL_TENSOR_BYTES]
        large = [n for n in bucket if n >= SMALL_TENSOR_BYTES]
        return ([sum(small)] if small else []) + large, (sum(small) if len(small) > 1 else 0)
    raise ValueError(f"unknown packing {packing!r}: expected per_tensor, flat or hybrid")


def message_seconds(nbytes: float, receivers: int, link: Link, algorithm: str) -> float:
    """One broadcast of `nbytes` from the root to `receivers` ranks.

    flat  the root sends to each receiver in turn:        S * (m/bw + a)
    tree  binomial tree (gloo's broadcast), ceil(log2(S+1)) rounds of the whole message
    ring  pipelined chain as NCCL does: m/bw + (S - 1) * chunk/bw (filling the pipe) + (S + chunks) * a
    """
    step = nbytes / link.bandwidth + link.latency
    if algorithm == "flat":
        return receivers * step
    if algorithm == "tree":
        return math.ceil(math.log2(receivers + 1)) * step
    if algorithm == "ring":
        chunk = min(nbytes, link.chunk_bytes)
        chunks = math.ceil(nbytes / link.chunk_bytes)
        return nbytes / link.bandwidth + (receivers - 1) * chunk / link.bandwidth + (receivers + chunks) * link.latency
    raise ValueError(f"unknown algorithm {algorithm!r}: expected flat, tree or ring")


@dataclass
class Prediction:
    """Seconds per term of one update; `total_s` is their sum (the bus runs them one after another)."""
    broadcast_s: float
    pack_s: float = 0.0
    gather_s: float = 0.0
    staging_s: float = 0.0
    load_s: float = 0.0
    fixed_s: float = 0.0
    buckets: int = 1
    terms: dict = field(init=False)

    def __post_init__(self):
        self.terms = {"broadcast": self.broadcast_s, "pack": self.pack_s, "zero3 gather": self.gather_s,
                      "host staging": self.staging_s, "vLLM load": self.load_s, "fixed": self.fixed_s}

    @property
    def total_s(self) -> float:
        return sum(self.terms.values())

    @property
    def overlapped_s(self) -> float:
        """With bucket k+1 moving while bucket k loads: the largest term plus one bucket of the rest."""
        per_bucket = [v for k, v in self.terms.items() if k != "fixed"]
        big = max(per_bucket)
        return self.fixed_s + big + (sum(per_bucket) - big) / self.buckets

    @property
    def dominant(self) -> str:
        return max(self.terms, key=self.terms.get)


def predict(tensor_bytes: list[int], receivers: int, bucket_bytes: int, link: Link, algorithm: str = "ring",
            packing: str = "flat", learners: int = 1, gather_link: Link | None = None, copy_bw: float | None = None,
            staging_bw: float | None = None, load_bw: float | None = None, load_per_tensor_s: float = 0.0,
            fixed_s: float = 0.0) -> Prediction:
    """One update of the tensors `tensor_bytes` (bytes each, in send order) to `receivers` samplers.

    learners      ZeRO-3 ranks; > 1 adds a ring all-gather per bucket: b*(L-1)/L/bw + (L-1)*a
                  over `gather_link` (default: `link`);
    copy_bw       bytes/s of the sender's flattening copy (flat / hybrid packing); None: free;
    staging_bw    bytes/s of each host copy when GPU tensors ride gloo: device->host on the sender,
                  host->device on the receivers (in parallel): 2 * B / staging_bw; None: no staging;
    load_bw, load_per_tensor_s   the receiver's load into vLLM: B / load_bw + T * per tensor;
    fixed_s       per update (control message, reload bookkeeping).
    """
    if receivers < 1:
        raise ValueError("a weight update needs at least one receiver")
    buckets = plan_buckets(list(tensor_bytes), bucket_bytes)
    total = sum(tensor_bytes)
    broadcast = pack = gather = 0.0
    glink = gather_link or link
    for bucket in buckets:
        msgs, copied = messages(bucket, packing)
        in_flight = min(link.streams, len(msgs))
        broadcast += sum(message_seconds(m, receivers, link, algorithm) for m in msgs) / in_flight
        if copy_bw:
            pack += copied / copy_bw
        if learners > 1:
            gather += sum(bucket) * (learners - 1) / learners / glink.bandwidth + (learners - 1) * glink.latency
    staging = 2 * total / staging_bw if staging_bw else 0.0
    load = (total / load_bw if load_bw else 0.0) + len(tensor_bytes) * load_per_tensor_s
    return Prediction(broadcast, pack, gather, staging, load, fixed_s, buckets=len(buckets))
