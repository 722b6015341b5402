import multiprocessing as mp

import pytest
import torch

from ada_ray.sync.weight_bus import TensorSpec, WeightBusReceiver, WeightBusSender, plan_buckets


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "a.weight": torch.randn(64, 32, generator=g),
        "b.bias": torch.randn(7, generator=g),
        "c.half": torch.randn(16, 16, generator=g).to(torch.bfloat16),
        "d.big": torch.randn(300, 300, generator=g),
        "e.large": torch.randn(600, 600, generator=g),  # > 1 MiB: travels alone under hybrid
    }


def _receiver(port, rank, world, meta_q, out_q):
    r = WeightBusReceiver("127.0.0.1", port, rank, world, "gloo", timeout_s=60)
    r.connect()
    while True:
        meta = meta_q.get()
        if meta is None:
            break
        got = dict(r.receive(meta))
        out_q.put((rank, meta["version"], {k: v.clone() for k, v in got.items()}))


@pytest.mark.parametrize("packing", ["per_tensor", "flat", "hybrid"])
def test_broadcast_reaches_every_receiver_bit_exact(packing):
    ctx = mp.get_context("spawn")
    world = 3
    sender = WeightBusSender(world, "gloo", "127.0.0.1", bucket_mb=0.5 if packing == 'hybrid' else 0.1, packing=packing, timeout_s=60)
    meta_qs = [ctx.Queue() for _ in range(world - 1)]
    out_q = ctx.Queue()
    procs = [ctx.Process(target=_receiver, args=(sender.port, r + 1, world, meta_qs[r], out_q)) for r in range(world - 1)]
    for p in procs:
        p.start()
    try:
        sender.connect()
        for version in (1, 2):
            state = _state(version)
            meta = sender.meta(state.items(), version)
            assert len(meta["buckets"]) > 1  # 0.1 MB buckets split this state dict
            for q in meta_qs:
                q.put(meta)
            stats = sender.send(state.items(), meta)
            assert stats["bytes"] == sum(t.numel() * t.element_size() for t in state.values())
            for _ in range(world - 1):
                rank, v, got = out_q.get(timeout=60)
                assert v == version and set(got) == set(state)
                for k in state:
                    assert got[k].dtype == state[k].dtype and torch.equal(got[k], state[k])
    finally:
        for q in meta_qs:
            q.put(None)
        for p in procs:
            p.join(timeout=30)
        sender.close()
    assert all(p.exitcode == 0 for p in procs)


def test_bucket_plan_is_greedy_in_order():
    specs = [TensorSpec(f"t{i}", (256,), "torch.float32") for i in range(5)]  # 1 KiB each
    assert [[s.name for s in b] for b in plan_buckets(specs, 2048)] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    big = [TensorSpec("huge", (4096,), "torch.float32")] + specs[:1]
    assert [[s.name for s in b] for b in plan_buckets(big, 2048)] == [["huge"], ["t0"]]


def test_bus_listens_on_loopback_only():
    import os

    import psutil

    ctx = mp.get_context("spawn")
    sender = WeightBusSender(2, "gloo", "127.0.0.1", timeout_s=60)
    meta_q, out_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(sender.port, 1, 2, meta_q, out_q))
    proc.start()
    try:
        sender.connect()
        me = psutil.Process(os.getpid())
        listening = [c for c in me.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        loopback = ("127.0.0.1", "::ffff:127.0.0.1", "::1")
        assert listening and all(c.laddr.ip in loopback for c in listening), listening
    finally:
        meta_q.put(None)
        proc.join(timeout=30)
        sender.close()


def test_port_in_use_is_a_clear_error():
    import socket

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            WeightBusSender(2, "gloo", "127.0.0.1", port=port)
    finally:
        blocker.close()
