"""WeightBus: one-to-many broadcast of a state dict from learner rank 0 (bus rank 0) to every
sampler (bus ranks 1..S), in buckets.

Protocol per update: one control message (the `meta`: version, packing, and per bucket the
tensors' names, shapes and dtypes) goes to each sampler by one Ray call; then the tensors go over
the bus's own process group, bucket by bucket. Receivers get the weights as a lazy iterator of
(name, tensor), so a loader can consume bucket after bucket and peak extra memory is one bucket.

Packing per bucket:
  per_tensor  one broadcast per tensor, all of a bucket issued before waiting (gloo: measured
              faster than flattening on CPU, where the copy into one buffer dominates);
  flat        the bucket's tensors copied into one contiguous buffer per dtype, one broadcast
              (NCCL: fewer, larger collectives);
  hybrid      tensors under 1 MiB flattened together (per dtype), larger ones one broadcast each:
              measured on gloo, many small tensors cost a fixed latency each (tiny policy: 75 MB/s
              per tensor vs 265 MB/s flat) while copying large ones into a buffer halves throughput
              (512 MB: 1144 MB/s per tensor vs 400 MB/s flat) - see BENCHMARKS.md;
  auto        hybrid on gloo, flat on NCCL.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import torch
import torch.distributed as dist

from ada_ray.sync.process_group import bound_listen_socket, make_group, make_store

_DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                                torch.int32, torch.uint8, torch.int8, torch.bool)}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=_DTYPES[self.dtype]).element_size()


def plan_buckets(specs: list[TensorSpec], bucket_bytes: int) -> list[list[TensorSpec]]:
    """Greedy, in order: a bucket closes when the next tensor would overflow it; a tensor larger
    than a bucket travels alone."""
    buckets: list[list[TensorSpec]] = []
    cur: list[TensorSpec] = []
    size = 0
    for s in specs:
        if cur and size + s.nbytes > bucket_bytes:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.nbytes
    if cur:
        buckets.append(cur)
    return buckets


SMALL_TENSOR_BYTES = 1 << 20  # hybrid packing: tensors below this travel flattened together


def resolve_packing(packing: str, backend: str) -> str:
    if packing == "auto":
        return "flat" if backend == "nccl" else "hybrid"
    if packing not in ("per_tensor", "flat", "hybrid"):
        raise ValueError(f"unknown packing {packing!r}: expected auto, per_tensor, flat or hybrid")
    return packing


def _split(entries: list, packing: str, nbytes) -> tuple[list, list]:
    """(entries sent flattened, entries sent one by one) for a bucket under a packing."""
    if packing == "flat":
        return list(entries), []
    if packing == "per_tensor":
        return [], list(entries)
    small = [e for e in entries if nbytes(e) < SMALL_TENSOR_BYTES]
    return small, [e for e in entries if nbytes(e) >= SMALL_TENSOR_BYTES]


def _broadcast(pg, tensors: list[torch.Tensor]) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    works = [pg.broadcast([t], opts) for t in tensors]
    for w in works:
        w.wait()


class _BusMember:
    def __init__(self, backend: str, host: str, timeout_s: float):
        self.backend = backend
        self.host = host
        self.timeout_s = timeout_s
        self.pg = None
        self.store = None


class WeightBusSender(_BusMember):
    """Rank 0. Construct, hand `address` to the samplers, then `connect()` while they join."""

    def __init__(self, world_size: int, backend: str = "gloo", host: str = "127.0.0.1", port: int = 0,
                 bucket_mb: float = 64.0, packing: str = "auto", timeout_s: float = 300.0):
        super().__init__(backend, host, timeout_s)
        if world_size < 2:
            raise ValueError("a weight bus needs the learner and at least one sampler")
        self.world_size = world_size
        self.bucket_bytes = max(1, int(bucket_mb * 1024 * 1024))
        self.packing = resolve_packing(packing, backend)
        self._sock: Optional[socket.socket] = bound_listen_socket(host, port)
        self.port = self._sock.getsockname()[1]
        self._specs: Optional[list[TensorSpec]] = None
        self._buckets: Optional[list[list[TensorSpec]]] = None

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def connect(self) -> None:
        """Blocks until every receiver has joined."""
        self.store = make_store(self.host, self.port, self.world_size, True, self.timeout_s, self._sock)
        if self._sock is not None:
            self._sock.detach()  # the store owns the listening fd now
            self._sock = None
        self.pg = make_group(self.store, 0, self.world_size, self.backend, self.host, self.timeout_s)

    def meta(self, named: Iterable[tuple[str, torch.Tensor]], version: int) -> dict:
        return self.meta_from_specs([TensorSpec(n, tuple(t.shape), str(t.dtype)) for n, t in named], version)

    def meta_from_specs(self, specs: list[TensorSpec], version: int) -> dict:
        """The meta for tensors known by name, shape and dtype (ZeRO-3: full shapes of partitioned
        parameters, which hold no data until gathered)."""
        if specs != self._specs:
            self._specs = specs
            self._buckets = plan_buckets(specs, self.bucket_bytes)
        assert self._buckets is not None
        return {"version": version, "packing": self.packing,
                "buckets": [[(s.name, list(s.shape), s.dtype) for s in b] for b in self._buckets]}

    def send(self, named: Iterable[tuple[str, torch.Tensor]], meta: dict) -> dict:
        """Broadcast the tensors described by `meta` (from `meta()` on the same tensors)."""
        if self.pg is None:
            raise RuntimeError("WeightBusSender.send before connect()")
        tensors = dict(named)
        t0 = time.perf_counter()
        nbytes = sum(self.send_bucket(tensors, bucket, meta["packing"]) for bucket in meta["buckets"])
        seconds = time.perf_counter() - t0
        return {"bytes": nbytes, "seconds": seconds, "buckets": len(meta["buckets"])}

    def send_bucket(self, tensors: dict[str, torch.Tensor], bucket: list, packing: str) -> int:
        """Broadcast one bucket of a meta (`tensors` needs only that bucket's names); returns its
        bytes. Receivers take buckets in order, so a caller that gathers per bucket (ZeRO-3) sends
        them one by one, in the meta's order."""
        if self.pg is None:
            raise RuntimeError("WeightBusSender.send_bucket before connect()")
        ts = [tensors[name].detach() for name, _, _ in bucket]
        if self.backend == "gloo":  # gloo moves host memory: GPU tensors (colocated mode) are staged
            ts = [t.cpu() if t.is_cuda else t for t in ts]
        ts = [t if t.is_contiguous() else t.contiguous() for t in ts]
        packed, single = _split(ts, packing, lambda t: t.numel() * t.element_size())
        flats = [torch.cat([t.reshape(-1) for t in group]) if len(group) > 1 else group[0].reshape(-1)
                 for group in _by_dtype(packed).values()]
        _broadcast(self.pg, flats + single)
        return sum(t.numel() * t.element_size() for t in ts)

    def close(self) -> None:
        self.pg = None
        self.store = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _by_dtype(ts: list[torch.Tensor]) -> dict[torch.dtype, list[torch.Tensor]]:
    out: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in ts:
        out.setdefault(t.dtype, []).append(t)
    return out


class WeightBusReceiver(_BusMember):
    """Ranks 1..S. `connect()` blocks until every member has joined."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str = "gloo",
                 timeout_s: float = 300.0, device: str = "cpu"):
        super().__init__(backend, host, timeout_s)
        self.port, self.rank, self.world_size, self.device = port, rank, world_size, device

    def connect(self) -> None:
        self.store = make_store(self.host, self.port, self.world_size, False, self.timeout_s)
        self.pg = make_group(self.store, self.rank, self.world_size, self.backend, self.host, self.timeout_s)

    def receive(self, meta: dict) -> Iterator[tuple[str, torch.Tensor]]:
        """Yields (name, tensor) bucket by bucket as the broadcasts arrive. Consume it fully."""
        if self.pg is None:
            raise RuntimeError("WeightBusReceiver.receive before connect()")
        for bucket in meta["buckets"]:
            specs = [(name, tuple(shape), _DTYPES[dtype]) for name, shape, dtype in bucket]
            packed, single = _split(specs, meta["packing"],
                                    lambda e: _numel(e[1]) * torch.empty((), dtype=e[2]).element_size())
            groups: dict[torch.dtype, list[tuple[str, tuple]]] = {}
            for name, shape, dtype in packed:  # same grouping as the sender: by dtype, in order
                groups.setdefault(dtype, []).append((name, shape))
            flats = [(items, torch.empty(sum(_numel(sh) for _, sh in items), dtype=dtype, device=self.device))
                     for dtype, items in groups.items()]
            singles = [(name, torch.empty(shape, dtype=dtype, device=self.device)) for name, shape, dtype in single]
            _broadcast(self.pg, [f for _, f in flats] + [t for _, t in singles])
            out = dict(singles)
            for items, flat in flats:
                for (name, shape), part in zip(items, torch.split(flat, [_numel(sh) for _, sh in items])):
                    out[name] = part.view(shape)
            for name, _, _ in specs:
                yield name, out[name]

    def close(self) -> None:
        self.pg = None
        self.store = None


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
