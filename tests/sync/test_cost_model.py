"""Worked examples for the weight-bus cost model: each number is computed by hand in the comment next
to it, so dropping a term or getting a fan-out wrong fails here."""

import math

import pytest

from ada_ray.sync.cost_model import (GLOO_LOOPBACK, HBM_COPY, IB_NDR, NVLINK4, Link, MiB, message_seconds, messages,
                                     plan_buckets, predict, uniform)

# 1 GB/s, 1 ms per message-step, 250 MB ring chunks: easy arithmetic
SLOW = Link("test", 1e9, 1e-3, streams=1, chunk_bytes=250_000_000)


def test_fan_out_of_each_algorithm():
    m = 1e9  # 1 s on the wire per copy
    # flat: the root sends 4 copies in turn: 4 * (1 + 0.001) = 4.004
    assert message_seconds(m, 4, SLOW, "flat") == pytest.approx(4.004)
    # binomial tree: ceil(log2(5)) = 3 rounds of the whole message: 3 * 1.001 = 3.003
    assert message_seconds(m, 4, SLOW, "tree") == pytest.approx(3.003)
    # ring, 4 chunks of 250 MB: 1 + (4 - 1) * 0.25 (pipeline fill) + (4 hops + 4 chunks) * 0.001 = 1.758
    assert message_seconds(m, 4, SLOW, "ring") == pytest.approx(1.758)
    # one receiver: flat = tree = 1.001; ring = 1 + 0 + (1 + 4) * 0.001 = 1.005
    assert message_seconds(m, 1, SLOW, "flat") == pytest.approx(1.001)
    assert message_seconds(m, 1, SLOW, "tree") == pytest.approx(1.001)
    assert message_seconds(m, 1, SLOW, "ring") == pytest.approx(1.005)


def test_scaling_from_8_to_64_receivers():
    m = 1e9
    # flat is linear in S: 64 / 8 = 8x
    assert message_seconds(m, 64, SLOW, "flat") / message_seconds(m, 8, SLOW, "flat") == pytest.approx(8.0)
    # tree: ceil(log2(65)) = 7 rounds against ceil(log2(9)) = 4
    assert message_seconds(m, 64, SLOW, "tree") / message_seconds(m, 8, SLOW, "tree") == pytest.approx(7 / 4)
    # ring: 56 more hops, each one chunk of fill (0.25 s) and one latency (0.001 s): +14.056 s
    extra = message_seconds(m, 64, SLOW, "ring") - message_seconds(m, 8, SLOW, "ring")
    assert extra == pytest.approx(56 * 0.25 + 56 * 0.001)
    # with NCCL-like 4 MiB chunks the ring barely grows: 56 * (4 MiB / 1 GB/s + 1 ms) = 0.291 s over ~1.0 s
    fine = Link("fine", 1e9, 1e-3, chunk_bytes=4 * MiB)
    assert message_seconds(m, 64, fine, "ring") - message_seconds(m, 8, fine, "ring") == pytest.approx(
        56 * (4 * MiB / 1e9 + 1e-3))


def test_buckets_match_the_weight_bus():
    torch = pytest.importorskip("torch")
    from ada_ray.sync import weight_bus

    shapes = [(300, 300), (7,), (600, 600), (1000, 1000), (5, 5), (128, 64)]
    specs = [weight_bus.TensorSpec(f"t{i}", s, str(torch.float32)) for i, s in enumerate(shapes)]
    sizes = [s.nbytes for s in specs]
    for bucket_bytes in (1, 500_000, 2 * MiB, 10 * MiB):
        assert plan_buckets(sizes, bucket_bytes) == [[s.nbytes for s in b]
                                                     for b in weight_bus.plan_buckets(specs, bucket_bytes)]


def test_messages_per_packing():
    bucket = [100, 2 * MiB, 200, 3 * MiB]
    assert messages(bucket, "per_tensor") == (bucket, 0)  # 4 broadcasts, no copy
    assert messages(bucket, "flat") == ([5 * MiB + 300], 5 * MiB + 300)  # 1 broadcast, all copied
    assert messages(bucket, "hybrid") == ([300, 2 * MiB, 3 * MiB], 300)  # smalls together, larges alone
    assert messages([2 * MiB], "flat") == ([2 * MiB], 0)  # one tensor: no concatenation (as weight_bus)


def test_every_term_of_a_full_update():
    # 4 tensors of 1 GB, 2 GB buckets -> 2 buckets of 2 tensors, flat packing -> 2 messages of 2 GB
    link = Link("t", 1e9, 1e-4, chunk_bytes=100_000_000)  # 20 chunks per message
    gather = Link("g", 2e9, 1e-3)
    p = predict([1_000_000_000] * 4, receivers=8, bucket_bytes=2_000_000_000, link=link, algorithm="ring",
                packing="flat", learners=4, gather_link=gather, copy_bw=4e9, staging_bw=5e9, load_bw=8e9,
                load_per_tensor_s=0.01, fixed_s=0.1)
    assert p.buckets == 2
    # ring per message: 2 + 7 * 0.1 + (8 + 20) * 1e-4 = 2.7028; two messages
    assert p.broadcast_s == pytest.approx(2 * 2.7028)
    # flattening copies each 2 GB bucket at 4 GB/s: 2 * 0.5
    assert p.pack_s == pytest.approx(1.0)
    # ZeRO-3, L = 4: per bucket 2e9 * 3/4 / 2e9 + 3 * 1e-3 = 0.753; two buckets
    assert p.gather_s == pytest.approx(2 * 0.753)
    # staging: device->host and host->device of 4 GB at 5 GB/s: 2 * 0.8
    assert p.staging_s == pytest.approx(1.6)
    # load: 4 GB at 8 GB/s + 4 tensors * 10 ms = 0.54
    assert p.load_s == pytest.approx(0.54)
    assert p.total_s == pytest.approx(5.4056 + 1.0 + 1.506 + 1.6 + 0.54 + 0.1)
    assert p.dominant == "broadcast"
    # double-buffered: fixed + the largest term + one bucket's share of the others
    assert p.overlapped_s == pytest.approx(0.1 + 5.4056 + (1.0 + 1.506 + 1.6 + 0.54) / 2)


def test_one_learner_gathers_nothing_and_streams_only_help_several_messages():
    assert predict([1000] * 4, 1, 10_000, SLOW, "flat", learners=1).gather_s == 0.0
    two = Link("two", 1e9, 1e-3, streams=2)
    # two 1 GB tensors in one bucket, per tensor: two streams carry both at once -> half of 2 * 1.001
    assert predict([10**9] * 2, 1, 3 * 10**9, two, "flat", "per_tensor").broadcast_s == pytest.approx(1.001)
    # one flattened message: nothing to run side by side -> 2.001 (2 GB + one latency)
    assert predict([10**9] * 2, 1, 3 * 10**9, two, "flat", "flat").broadcast_s == pytest.approx(2.001)


def test_gloo_calibration_reproduces_the_measured_cpu_rows():
    # BENCHMARKS.md "Weight broadcast": 537 MB synthetic (64 x 8 MiB), 2 receivers, memcpy 1,226 MB/s
    synth, memcpy = [8 * MiB] * 64, 1226e6
    # hybrid 64 MB: 8 buckets of 8 messages, 2 at a time, 2 tree rounds:
    # 2 * (537 MB / 1.10 GB/s + 64 * 0.75 ms) / 2 = 0.536 s; measured 0.489 s
    hybrid = predict(synth, 2, 64 * MiB, GLOO_LOOPBACK, "tree", "hybrid", copy_bw=memcpy).total_s
    assert hybrid == pytest.approx(0.536, abs=0.002)
    assert 0.8 < hybrid / 0.489 < 1.25
    # flat 64 MB: 2 * (0.488 + 8 * 0.75 ms) + 537 MB / 1,226 MB/s (the concatenation) = 1.426 s; measured 1.413 s
    flat = predict(synth, 2, 64 * MiB, GLOO_LOOPBACK, "tree", "flat", copy_bw=memcpy).total_s
    assert flat == pytest.approx(1.426, abs=0.002)
    assert 0.8 < flat / 1.413 < 1.25


def test_7b_to_8_samplers_over_nvlink_meets_5_s_and_flat_to_64_over_ib_does_not():
    model = uniform(14e9, 339)  # 7B in bf16, 339 tensors (a Qwen2.5-7B's count)
    zero3 = dict(learners=8, gather_link=NVLINK4, load_bw=HBM_COPY, load_per_tensor_s=3e-4, fixed_s=0.1)
    ring8 = predict(model, 8, 256 * MiB, NVLINK4, "ring", **zero3)
    # broadcast 14e9 / 450e9 = 0.031 s + latencies; gather 14e9 * 7/8 / 450e9 = 0.027 s;
    # load 14e9 / 1.675e12 + 339 * 0.3 ms = 0.110 s; fixed 0.1 s -> about 0.28 s
    assert ring8.total_s == pytest.approx(0.28, abs=0.02)
    assert ring8.total_s <= 5.0
    # flat to 64 over one NDR NIC: 64 * 14e9 / 50e9 = 17.9 s of broadcast alone
    flat64 = predict(model, 64, 256 * MiB, IB_NDR, "flat", **zero3)
    assert flat64.broadcast_s == pytest.approx(64 * 14e9 / 50e9, rel=0.01)
    assert flat64.total_s > 5.0 and flat64.dominant == "broadcast"
    # a ring to 64: one copy's time 14e9 / 50e9 = 0.280 s, plus every one of the 57 buckets (6 tensors
    # of 41.3 MB each) refilling the 63-hop pipe: 57 * 63 * 4 MiB / 50e9 = 0.301 s, plus latencies
    # (57 buckets * 64 hops + 3390 chunks) * 14 us = 0.099 s -> 0.680 s; larger buckets refill less often
    ring64 = predict(model, 64, 256 * MiB, IB_NDR, "ring")
    assert ring64.buckets == 57
    assert ring64.broadcast_s == pytest.approx(0.280 + 57 * 63 * 4 * MiB / 50e9 + (57 * 64 + 3390) * 14e-6)
    assert predict(model, 64, 1024 * MiB, IB_NDR, "ring").broadcast_s < ring64.broadcast_s
    assert math.isclose(sum(model), 14e9, rel_tol=1e-6)
