"""Chaos: over one run, a seeded schedule kills the PromptQueue, the learner and a sampler (SIGKILL
to the actor's process) at three moments. The run heals itself - samplers are replaced in place,
a dead queue or learner makes the driver rebuild the runtime from the last checkpoint
(trainer.max_restarts) - and finishes with every step trained once and no prompt trained twice."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time

import pytest

from ada_ray.config import load_config
from ada_ray.driver.trainer import train
from tests.integration.conftest import SESSION_MARK, _ours, tiny_overrides

pytestmark = pytest.mark.slow

SEED = 20261204
STEPS = 14


def last_step(run_dir) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return -1
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]
    return max(steps, default=-1)


def actor_pids(cls: str) -> list[int]:
    """This test session's actors of `cls` (the session mark in their environment): a Ray cluster of anyone
    else on the machine - another run, a bench - is never touched."""
    out = subprocess.run(["pgrep", "-f", f"ray::{cls}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if _ours(int(p), os.environ[SESSION_MARK])]


def test_run_survives_killed_queue_learner_and_sampler(ray_cluster, model_path, tmp_path):
    cfg = load_config("grpo", tiny_overrides(tmp_path, **{
        "trainer.total_steps": STEPS, "trainer.save_every": 2, "trainer.max_restarts": 3,
        "weight_sync.timeout_s": 30}))
    run_dir = tmp_path / "run"
    rng = random.Random(SEED)
    victims = rng.sample(["PromptQueue", "Learner", "Sampler"], 3)
    moments = sorted(rng.sample(range(3, STEPS - 2), 3))  # kill once the run has logged this step
    kills: list[tuple[str, int, list[int]]] = []
    done = threading.Event()

    def chaos():
        for victim, at in zip(victims, moments):
            while last_step(run_dir) < at:
                if done.wait(0.2):
                    return
            pids = actor_pids(victim)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            kills.append((victim, at, pids))

    logs: list[str] = []
    killer = threading.Thread(target=chaos, daemon=True)
    killer.start()
    t0 = time.time()
    try:
        assert train(cfg, log=logs.append) == 0
    finally:
        done.set()
        killer.join(timeout=10)
    assert [(v, at) for v, at, pids in kills if pids] == list(zip(victims, moments)), (kills, logs[-20:])
    restarts = [line for line in logs if line.startswith("restart ")]
    assert len(restarts) == 2, logs  # queue and learner: rebuilt from a checkpoint; the sampler: replaced in place
    assert all("resuming from step" in line for line in restarts), restarts
    assert any("sampler-0" in line and "replacing" in line for line in logs), logs

    trained = [json.loads(line) for line in (run_dir / "trained_prompts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trained] == list(range(STEPS))  # every step once: redone steps were dropped
    prompts = [p for r in trained for p in r["prompts"]]
    assert len(prompts) == len(set(prompts))  # 84 of 96 prompts: one epoch, none trained twice
    acct = json.loads((run_dir / "accounting.json").read_text())
    assert acct["items_ok"] and acct["prompts_ok"], acct
    metrics_steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics_steps == sorted(set(metrics_steps)) and metrics_steps[-1] == STEPS
    print(f"chaos: killed {[(v, at) for v, at, _ in kills]}, {len(restarts)} restarts, {time.time() - t0:.0f} s")
    print("\n".join(restarts))
