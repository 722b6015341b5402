"""A sharded PromptQueue with real Ray actors (trainer.queue_shards = 2): two PromptQueue shards and
the QueueCoordinator, simulated samplers leasing from and reporting to shard i % 2, cohorts taken
through the coordinator, its checkpoint loaded into a fresh one."""

from __future__ import annotations

import random

import pytest

from ada_ray.actors.queue_coordinator import build_queue
from ada_ray.algo.queue_shards import shard_of
from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Prompt, Sample, Signal
from ada_ray.config import ConfigError, load_config, to_dict

pytestmark = pytest.mark.slow

B, K, SAMPLERS, STALENESS = 10, 2, 4, 1


def prompts(n=200):
    return [Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(n)]


def config(**extra):
    over = {"algo.name": "ada_seq_balance", "trainer.batch_prompts": B, "trainer.queue_shards": K,
            "trainer.max_staleness": STALENESS, "trainer.total_steps": 50}
    over.update(extra)
    return to_dict(load_config(overrides=[f"{k}={v}" for k, v in over.items()]))


def serve(ray, shards, rng, sampler_ids=range(SAMPLERS), rounds=1):
    """Each simulated sampler i leases a few items from shard i % K and reports scored samples."""
    for _ in range(rounds):
        for i in sampler_ids:
            shard = shards[i % len(shards)]
            items = ray.get(shard.lease.remote(f"sampler-{i}", rng.randint(1, 6)))
            if not items:
                continue
            reports = [(it.item_id, [Sample(it.prompt_id, [7], [-0.1], float(rng.random() < 0.5), it.version)
                                     for _ in range(it.num_samples)]) for it in items]
            assert all(ray.get(shard.report_many.remote(f"sampler-{i}", reports)))


def take(ray, queue, shards, step, rng):
    while True:
        got = ray.get(queue.wait_cohort.remote(step, 0.02))
        if isinstance(got, CohortResult):
            return got
        assert got == Signal.TIMEOUT
        serve(ray, shards, rng)


def check_cohort(c, step):
    ids = [g.prompt_id for g in c.groups]
    assert c.index == step and len(ids) == B and len(set(ids)) == B  # B groups, no prompt twice
    assert all(step - s.version <= STALENESS for g in c.groups for s in g.samples)  # admission control
    # shard order: shard 0's share (5 prompts) first, then shard 1's
    assert [shard_of(p, K) for p in ids] == [0] * 5 + [1] * 5


def test_two_shards_behind_a_coordinator(ray_cluster):
    ray = ray_cluster
    rng = random.Random(0)
    cfg = config()
    opts = {"num_cpus": 0}
    made = []

    def build(c):
        q, sh = build_queue(prompts(), c, options=opts)
        made.extend([q, *sh])
        return q, sh

    queue, shards = build(cfg)
    assert len(shards) == K and ray.get(queue.num_shards.remote()) == K
    try:
        # shard 0 finishes cohort 0, shard 1 has not started: the coordinator times out and takes nothing
        while ray.get(shards[0].cohort_ready.remote(0, 0.0)) != Signal.READY:
            serve(ray, shards, rng, sampler_ids=[0, 2])
        assert ray.get(queue.wait_cohort.remote(0, 0.2)) == Signal.TIMEOUT
        assert ray.get(shards[0].cohort_ready.remote(0, 0.0)) == Signal.READY  # still there, untaken
        for step in range(4):
            c = take(ray, queue, shards, step, rng)
            check_cohort(c, step)
            ray.get(queue.set_version.remote(step + 1))
        serve(ray, shards, rng, rounds=2)  # some work in flight, some leased, at the checkpoint
        assert ray.get(queue.release_sampler.remote("sampler-1")) >= 0
        stats = ray.get(queue.stats.remote())
        assert stats["shards"] == K and stats["version"] == 4 and stats["calls"] > 0
        assert set(ray.get(queue.resources.remote())) >= {"cpu_s", "rss_mb"}
        est = ray.get(queue.estimator_state.remote())
        assert est["stats"] and all(p.startswith("p") for p in est["stats"])
        state = ray.get(queue.state_dict.remote())
        assert state["queue_shards"] == K and len(state["shards"]) == K

        # the checkpoint in a fresh coordinator: it goes on from cohort 4
        queue2, shards2 = build(cfg)
        ray.get(queue2.load_state_dict.remote(state))
        for step in range(4, 6):
            c = take(ray, queue2, shards2, step, rng)
            check_cohort(c, step)
            ray.get(queue2.set_version.remote(step + 1))
        acc = ray.get(queue2.stop.remote())
        assert acc["items_ok"] and acc["prompts_ok"] and acc["prompts_trained"] == 6 * B
        assert ray.get(queue2.wait_cohort.remote(6, 0.1)) == Signal.END
        assert ray.get(shards2[0].lease.remote("sampler-0", 1)) == Signal.STOP

        # saved with 2 shards, loaded into 3: a clear error naming the key and both values
        queue3, _ = build(config(**{"trainer.queue_shards": 3}))
        with pytest.raises(Exception, match=r"trainer.queue_shards = 2, this run has trainer.queue_shards = 3"):
            ray.get(queue3.load_state_dict.remote(state))
        acc = ray.get(queue.stop.remote())  # the first queue's accounting balances too
        assert acc["items_ok"] and acc["prompts_ok"] and acc["prompts_trained"] == 4 * B
    finally:
        for a in made:
            ray.kill(a)


def test_end_of_data_in_one_shard_ends_every_shard(ray_cluster):
    ray = ray_cluster
    rng = random.Random(1)
    ps = prompts(40)  # one epoch: shard sizes differ, the smaller shard runs out first
    cfg = config(**{"trainer.total_epochs": 1, "trainer.batch_prompts": 4})
    queue, shards = build_queue(ps, cfg, options={"num_cpus": 0})
    try:
        sizes = [sum(shard_of(p.prompt_id, K) == k for p in ps) for k in range(K)]
        step = 0
        while True:
            got = ray.get(queue.wait_cohort.remote(step, 0.02))
            if got == Signal.END:
                break
            if isinstance(got, CohortResult):
                assert len(got.groups) <= 4
                ray.get(queue.set_version.remote(step + 1))
                step += 1
            else:
                serve(ray, shards, rng)
        assert step <= min(sizes) // 2 + 1
        assert ray.get(queue.wait_cohort.remote(step + 1, 0.0)) == Signal.END
        acc = ray.get(queue.stop.remote())
        assert acc["items_ok"] and acc["prompts_ok"]
    finally:
        for a in [queue, *shards]:
            ray.kill(a)


def test_too_many_shards_for_the_data_is_a_config_error():
    with pytest.raises(ConfigError, match=r"trainer.queue_shards = 8: shard \d holds \d+ of the training set"):
        build_queue(prompts(12), config(**{"trainer.queue_shards": 8, "trainer.batch_prompts": 16}))


def test_training_with_two_queue_shards_checkpoints_and_resumes(ray_cluster, tmp_path):
    """The real system with trainer.queue_shards = 2 and two samplers (one per shard): full cohorts
    within the staleness bound, a sharded queue.json, and a resume that loses and repeats no prompt.
    The first run's samplers reach their shards through relays (sampler.queue_relay = per_node: one a shard
    on this node), the resumed run's directly."""
    import json

    from ada_ray.driver.trainer import train
    from tests.integration.conftest import tiny_overrides

    extra = {"trainer.queue_shards": 2, "sampler.num_samplers": 2, "trainer.save_every": 2,
             "trainer.total_epochs": 1}
    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **extra, **{"trainer.total_steps": 2,
                                                                             "sampler.queue_relay": "per_node"}))
    assert train(cfg) == 0
    saved = json.loads((tmp_path / "run" / "checkpoints" / "step_2" / "queue.json").read_text())
    assert saved["queue_shards"] == 2 and len(saved["shards"]) == 2
    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **extra, **{"trainer.total_steps": 4,
                                                                             "trainer.resume": "auto"}))
    assert train(cfg) == 0
    rd = tmp_path / "run"
    steps = [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "train/groups" in m]
    assert [m["step"] for m in steps] == [1, 2, 3, 4]
    assert steps[1]["queue/relayed_calls_total"] > 0  # the first run's calls came through the relays
    assert steps[3]["queue/relayed_calls_total"] == 0  # the resumed run's did not (a fresh queue counts anew)
    for m in steps:
        assert m["train/groups"] == cfg.trainer.batch_prompts
        assert m["train/staleness_max"] <= cfg.trainer.max_staleness
    trained = [p for line in (rd / "trained_prompts.jsonl").read_text().splitlines()
               for p in json.loads(line)["prompts"]]
    assert len(trained) == 4 * cfg.trainer.batch_prompts and len(set(trained)) == len(trained)
    acct = json.loads((rd / "accounting.json").read_text())
    assert acct["items_ok"] and acct["prompts_ok"]
