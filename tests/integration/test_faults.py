"""Fault injection: a sampler killed mid-run is replaced and the run goes on; a driver killed
mid-run resumes from its last checkpoint without losing or repeating a prompt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import ray

from ada_ray.driver import cluster as cl
from ada_ray.algo.types import Signal
from ada_ray.config import load_config
from ada_ray.data.datasets import load_splits
from ada_ray.driver.runtime import Runtime
from ada_ray.driver.step_metrics import cohort_metrics
from tests.integration.conftest import tiny_overrides
from tests.integration.test_ray_job import stop_cluster

pytestmark = pytest.mark.slow


def test_killed_sampler_is_replaced_and_run_completes(ray_cluster, model_path, tmp_path):
    """A sampler SIGKILLed at step 3 is replaced while the other keeps sampling; a cohort already holding
    its samples cannot be trained (its payloads died with it) and goes back to the queue once, as the
    trainer does; every step trains once and the accounting holds."""
    from transformers import AutoTokenizer

    from ada_ray.algo.payloads import CohortPayloadsLost

    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **{
        "sampler.num_samplers": 2, "weight_sync.timeout_s": 30, "trainer.total_steps": 8}))
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    logs: list[str] = []
    rt = Runtime.build(cfg, cl.connect(cfg), model_path, train_set.prompts, log=logs.append)
    try:
        rt.start_sampling()
        victim_pid = ray.get(rt.samplers[1].pid.remote())
        step, returned = 0, 0
        while step < cfg.trainer.total_steps:
            if step == 3 and victim_pid is not None:
                os.kill(victim_pid, signal.SIGKILL)
                killed_pid, victim_pid = victim_pid, None
            cohort = rt.wait_cohort(step, timeout_s=300, poll_s=2.0)
            assert cohort not in (Signal.TIMEOUT, Signal.END)
            m = cohort_metrics(cohort, step, cfg.algo.max_rounds)
            assert m["train/staleness_max"] <= cfg.trainer.max_staleness
            try:
                rt.train(cohort, step)
            except CohortPayloadsLost as e:  # as the trainer does: its prompts are sampled again, the step waits
                assert e.owners == ["sampler-1"] and returned == 0
                returned = rt.return_cohort(cohort, e.owners)
                continue
            step += 1
            rt.sync_weights(step)
        assert rt.replaced == 1 and any("sampler-1" in line and "replacing" in line for line in logs), logs
        # the run went on with sampler 0 while the replacement started; it joins once up (if it has not yet)
        deadline = time.monotonic() + 300
        while rt.starting and time.monotonic() < deadline:
            rt.poll_starting(wait_s=5.0)
        assert not rt.starting and not rt.gone and any("sampler-1.1 is up" in line for line in logs), logs
        new_pid = ray.get(rt.samplers[1].pid.remote())
        assert new_pid != killed_pid
        stats = rt.sampler_stats()[1]
        assert stats["version"] == cfg.trainer.total_steps  # the new sampler follows the weight bus
        steps_before = stats["steps"]
        rt.evaluate(train_set.prompts[:8], 2, 1.0, 0)  # spread over both samplers: the new one generates
        assert rt.sampler_stats()[1]["steps"] > steps_before
    finally:
        acct = rt.shutdown()
    assert acct["items_ok"] and acct["prompts_ok"]
    assert acct["reissued"] >= 0 and acct["issued"] == acct["completed"] + acct["reissued"] + acct["cancelled"]


def test_a_killed_queue_relay_takes_its_samplers_down_and_the_run_heals(ray_cluster, model_path, tmp_path):
    """sampler.queue_relay = per_node: both samplers reach the queue through one relay. Killed, it fails
    the calls it carried; its samplers die of them and are replaced, and the replacements get a new
    relay; every step trains, the accounting holds."""
    from transformers import AutoTokenizer

    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **{
        "sampler.num_samplers": 2, "sampler.queue_relay": "per_node", "weight_sync.timeout_s": 30,
        "trainer.total_steps": 6}))
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    logs: list[str] = []
    rt = Runtime.build(cfg, cl.connect(cfg), model_path, train_set.prompts, log=logs.append)
    try:
        assert len(rt.relays) == 1
        old = next(iter(rt.relays.values()))
        rt.start_sampling()
        for step in range(cfg.trainer.total_steps):
            if step == 2:
                ray.kill(old, no_restart=True)
            cohort = rt.wait_cohort(step, timeout_s=300, poll_s=2.0)
            assert cohort not in (Signal.TIMEOUT, Signal.END)
            rt.train(cohort, step)
            rt.sync_weights(step + 1)
        assert rt.replaced >= 1 and any("queue relay" in line and "starting a new one" in line for line in logs), logs
        assert next(iter(rt.relays.values())) is not old
    finally:
        acct = rt.shutdown()
    assert acct["items_ok"] and acct["prompts_ok"]


def _owners(cohort) -> set[str]:
    return {s.payload[0].owner for g in cohort.groups for s in g.samples if s.payload is not None}


def test_a_sampler_killed_while_its_samples_wait_for_the_learner_is_sampled_again(ray_cluster, model_path, tmp_path):
    """Payloads off the queue die with their sampler: a cohort taken but not yet trained when the sampler
    that made some of it is killed goes back to the queue, those prompts are sampled again by the others
    and the replacement, and every step trains once; nothing is lost, nothing trained twice."""
    from transformers import AutoTokenizer

    from ada_ray.actors.ray_payloads import RayPayloadStore
    from ada_ray.algo.payloads import CohortPayloadsLost, LostPayloads, remote_batches

    cfg = load_config("ada_seq_balance", tiny_overrides(tmp_path, **{
        "sampler.num_samplers": 2, "weight_sync.timeout_s": 30, "trainer.total_steps": 6}))
    assert cfg.sampler.payload_transport == "object_store"
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    logs: list[str] = []
    rt = Runtime.build(cfg, cl.connect(cfg), model_path, train_set.prompts, log=logs.append)
    lost_at, returned = None, 0
    try:
        rt.start_sampling()
        victim = rt.sampler_id(1)
        victim_pid = ray.get(rt.samplers[1].pid.remote())
        for step in range(cfg.trainer.total_steps):
            cohort = rt.wait_cohort(step, timeout_s=300, poll_s=2.0)
            assert cohort not in (Signal.TIMEOUT, Signal.END)
            if lost_at is None and step >= 1 and victim in _owners(cohort):
                os.kill(victim_pid, signal.SIGKILL)  # its samples in this cohort wait for the learner
                lost_at = step
                # readers ask the owner for its references: once Ray knows the process is dead, every fetch of
                # its batches fails (a moment after the SIGKILL at most); wait until it has
                batches = remote_batches(s for g in cohort.groups for s in g.samples if s.payload[0].owner == victim)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        RayPayloadStore().fetch(batches, 10)
                    except LostPayloads:
                        break
                    time.sleep(0.5)
                else:
                    pytest.fail("a SIGKILLed sampler's objects were still readable after 60 s")
                with pytest.raises(CohortPayloadsLost) as e:
                    rt.train(cohort, step)
                assert e.value.owners == [victim]
                returned = rt.return_cohort(cohort, [victim])
                assert returned > 0  # its prompts in this cohort, and in the open cohorts ahead of it
                cohort = rt.wait_cohort(step, timeout_s=300, poll_s=2.0)
                assert victim not in _owners(cohort) and len(cohort.groups) == cfg.trainer.batch_prompts
            rt.train(cohort, step)
            rt.sync_weights(step + 1)
        assert lost_at is not None, "the victim never had samples in a cohort: nothing was tested"
        assert rt.replaced == 1
        assert rt.queue_stats()["prompts_reissued"] >= returned
    finally:
        acct = rt.shutdown()
    assert acct["items_ok"] and acct["prompts_ok"] and acct["prompts_reissued"] >= returned > 0
    assert acct["prompts_trained"] == cfg.trainer.total_steps * cfg.trainer.batch_prompts  # each step once


def test_killed_driver_resumes_without_losing_or_repeating(tmp_path, model_path):
    out = tmp_path / "out"
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    env = dict(os.environ, RAY_TMPDIR=ray_tmp)
    args = [sys.executable, "-m", "ada_ray", "train", "ada_seq_pos"] + tiny_overrides(out, **{
        "trainer.save_every": 2, "trainer.total_steps": 6, "trainer.total_epochs": 1, "trainer.progress": "plain"})
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    run_dir = out / "run"
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            if (run_dir / "checkpoints" / "step_2" / "COMPLETE").is_file():
                break
            assert proc.poll() is None, "training ended before the checkpoint"
            time.sleep(0.5)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver (and its session) dies mid-run
        proc.wait()
    finally:
        stop_cluster(ray_tmp)
    res = subprocess.run(args + ["trainer.resume=auto"], env=env, capture_output=True, text=True, timeout=900)
    stop_cluster(ray_tmp)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "resumed from" in res.stdout
    trained = [json.loads(x) for x in (run_dir / "trained_prompts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trained] == list(range(6))
    ids = [p for r in trained for p in r["prompts"]]
    assert len(ids) == len(set(ids)) == 6 * 6  # one epoch: nothing repeated, every step full
    acct = json.loads((run_dir / "accounting.json").read_text())
    assert acct["items_ok"] and acct["prompts_ok"]
