"""The driver loop (driver/trainer.py) against an in-process fake runtime, in milliseconds: the
order of the verbs in a step, the audit log, when eval and checkpoints happen, how the loop ends
(data, budget, timeout, NaN streak), and the restart path (rebuild, resume from the last complete
checkpoint, every step trained once in the final logs)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ada_ray.algo.types import Prompt, Signal
from ada_ray.config import load_config
from ada_ray.driver import checkpoint as ckpt
from ada_ray.driver.progress import Progress
from ada_ray.driver.run_files import RunFiles
from ada_ray.driver.run_setup import RunSetup
from ada_ray.driver.runtime import RuntimeFailure
from ada_ray.driver.trainer import LiveRuntime, TrainingError, attempt, make_evaluator, train_steps, train_with_restarts
from tests.driver.fakes import FakeRuntime, FakeTracker, cohort


def _run(tmp_path, *overrides, eval_set=None) -> RunSetup:
    cfg = load_config("conf/default.yaml", ["trainer.total_steps=6", "trainer.save_every=0", "trainer.eval_every=0",
                                            "trainer.progress=off", *overrides])
    return RunSetup(cfg, lambda *_: None, tmp_path, "model-path", SimpleNamespace(prompts=[]), eval_set, FakeTracker())


def _loop(run, rt, step=0, meta=None):
    with RunFiles(run.run_dir) as files:
        evaluate = make_evaluator(rt, run.cfg, run.eval_set, run.tracker, files)
        return train_steps(rt, run, files, step, meta, evaluate, Progress(run.cfg.trainer.total_steps, "off"))


def _trained(run_dir) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "trained_prompts.jsonl").read_text().splitlines()]


def test_a_step_waits_trains_then_broadcasts_the_next_version(tmp_path):
    run, rt = _run(tmp_path), FakeRuntime([cohort(s) for s in range(6)])
    assert _loop(run, rt) == 6
    loop_verbs = [c[:2] for c in rt.calls if c[0] in ("wait", "train", "sync")]
    assert loop_verbs == [v for s in range(6) for v in (("wait", s), ("train", s), ("sync", s + 1))]
    assert rt.verbs("train")[2][2] == ("p2-0", "p2-1")  # the cohort of step 2 trains at step 2
    rows = [json.loads(x) for x in (tmp_path / "trained_prompts.jsonl").read_text().splitlines()]
    assert [r["prompts"] for r in rows[:2]] == [["p0-0", "p0-1"], ["p1-0", "p1-1"]]
    m = run.tracker.metrics
    assert sorted(m) == [1, 2, 3, 4, 5, 6]  # metrics are logged at the version they produced
    assert m[3]["learner/loss"] == 0.25 and m[3]["train/groups"] == 2.0
    assert m[3]["train/samples_generated_total"] == 24.0  # 3 cohorts x 8 samples
    assert m[3]["sampler/idle_ratio"] == pytest.approx(0.5 / 1.5)  # the step's delta, not the running total
    assert {"time/wait", "time/train", "time/sync", "perf/groups_per_s", "queue/calls_total"} <= set(m[3])
    assert [m[3][f"sampler/0/{k}_total"] for k in ("lease_calls", "report_calls", "asks_on_reports")] == [6.0, 9.0, 3.0]


def test_a_cohort_whose_payloads_were_lost_goes_back_and_its_step_trains_once(tmp_path):
    run, rt = _run(tmp_path, "trainer.total_steps=3"), FakeRuntime([cohort(s) for s in range(3)], lose_once={1: ["sampler-0"]})
    assert _loop(run, rt) == 3
    verbs = [c[:2] for c in rt.calls if c[0] in ("wait", "train", "return_cohort", "sync")]
    assert verbs == [("wait", 0), ("train", 0), ("sync", 1), ("wait", 1), ("train", 1), ("return_cohort", 1),
                     ("wait", 1), ("train", 1), ("sync", 2), ("wait", 2), ("train", 2), ("sync", 3)]
    assert rt.verbs("return_cohort") == [("return_cohort", 1, ("sampler-0",))]
    assert _trained(tmp_path) == [0, 1, 2]  # the audit log has the step once, when it trained
    assert run.tracker.metrics[3]["train/samples_generated_total"] == 24.0  # its samples counted once


def test_eval_and_checkpoints_when_due_and_at_the_end(tmp_path):
    ev = SimpleNamespace(prompts=[Prompt("e1", "q", (1,), "a", "easy"), Prompt("e2", "q", (1,), "b", "hard")])
    run = _run(tmp_path, "trainer.total_steps=5", "trainer.eval_every=2", "trainer.save_every=2",
               "trainer.final_eval=true", eval_set=ev)
    rt = FakeRuntime([cohort(s) for s in range(5)])
    assert _loop(run, rt) == 5
    assert [c[1] for c in rt.verbs("evaluate")] == [2, 4, 5]  # every 2 steps, and the last one
    assert [c[1] for c in rt.verbs("save")] == ["step_2", "step_4", "step_5"]
    assert ckpt.find_latest(tmp_path) == str(tmp_path / "checkpoints" / "step_5")
    assert ckpt.load_meta(ckpt.find_latest(tmp_path))["generated_samples"] == 40.0
    evals = [json.loads(x) for x in (tmp_path / "eval_per_prompt.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [2, 4, 5] and evals[0]["ids"] == ["e1", "e2"]
    assert "eval/avg@" + str(run.cfg.trainer.eval_samples) in run.tracker.metrics[4]


def test_the_loop_ends_when_the_data_does(tmp_path):
    run, rt = _run(tmp_path), FakeRuntime([cohort(0), cohort(1), Signal.END])
    assert _loop(run, rt) == 2
    assert _trained(tmp_path) == [0, 1] and not rt.verbs("train")[2:]


def test_the_sample_budget_ends_the_loop(tmp_path):
    run = _run(tmp_path, "trainer.total_samples=20")  # 8 samples a step: the budget is reached at step 3
    assert _loop(run, FakeRuntime([cohort(s) for s in range(6)])) == 3


def test_no_cohort_in_time_is_an_error_naming_the_step_and_the_setting(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(TrainingError, match=r"no cohort for step 1 within sampler.lease_timeout_s"):
        _loop(run, FakeRuntime([cohort(0), Signal.TIMEOUT]))


def test_a_streak_of_nonfinite_steps_stops_the_run(tmp_path):
    run = _run(tmp_path, "learner.max_nonfinite_steps=3")
    rt = FakeRuntime([cohort(s) for s in range(6)], nonfinite={0: 1, 1: 2, 2: 3})
    with pytest.raises(TrainingError, match="3 training steps in a row had a NaN/inf loss"):
        _loop(run, rt)
    assert not rt.verbs("sync")[2:]  # the step that hit the streak broadcasts nothing


def test_a_dead_learner_rebuilds_from_the_last_checkpoint_and_trains_each_step_once(tmp_path):
    run = _run(tmp_path, "trainer.save_every=2", "trainer.max_restarts=1")
    first = FakeRuntime([cohort(s) for s in range(6)], fail_train={3: RuntimeFailure("learner step did not finish")})
    second = FakeRuntime([cohort(s) for s in range(6)])
    built = iter([first, second])
    live = LiveRuntime()
    with RunFiles(tmp_path) as files:
        assert train_with_restarts(run, files, lambda: next(built), live) == (6, 1)
    assert first.stopped and live.rt is second  # the broken runtime is discarded, the new one runs on
    assert ("load", "step_2") in second.calls and ("load_queue", 2) in second.calls
    assert second.verbs("wait")[0] == ("wait", 2)  # resumes at the checkpoint's step
    assert ("start_sampling",) in second.calls and ("check_shared_dir",) in second.calls
    assert _trained(tmp_path) == [0, 1, 2, 3, 4, 5]  # step 2 (trained, then lost) appears once


def test_failures_that_would_fail_again_are_not_retried(tmp_path):
    run = _run(tmp_path, "trainer.max_restarts=3")
    rt = FakeRuntime([cohort(0)], fail_train={0: ValueError("a bug")})
    builds = []
    with RunFiles(tmp_path) as files, pytest.raises(ValueError, match="a bug"):
        train_with_restarts(run, files, lambda: builds.append(1) or rt, LiveRuntime())
    assert builds == [1]


def test_restarts_stop_at_max_restarts(tmp_path):
    run = _run(tmp_path, "trainer.max_restarts=1")
    dying = [FakeRuntime([cohort(0)], fail_train={0: RuntimeFailure(f"learner step {i}")}) for i in range(3)]
    built = iter(dying)
    with RunFiles(tmp_path) as files, pytest.raises(RuntimeFailure, match="learner step 1"):
        train_with_restarts(run, files, lambda: next(built), LiveRuntime())


def test_eval_at_start_only_on_a_fresh_first_attempt(tmp_path):
    ev = SimpleNamespace(prompts=[Prompt("e1", "q", (1,), "a")])
    run = _run(tmp_path, "trainer.total_steps=1", "trainer.eval_every=5", "trainer.eval_at_start=true",
               "trainer.final_eval=false", eval_set=ev)
    rt = FakeRuntime([cohort(0)])
    with RunFiles(tmp_path) as files:
        assert attempt(rt, run, files, None, None, first=True) == 1
    assert rt.verbs("evaluate") == [("evaluate", 0)] and 0 in run.tracker.metrics
