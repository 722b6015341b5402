"""`ada-ray bench gpu` (ada_ray/bench/gpu.py): on CPU it runs the same learner and weight-bus code small,
and its table reports failures and skipped parts as such."""

import json

import pytest

from ada_ray.bench import gpu


def _result(**parts):
    env = {"torch": "2", "cuda": None, "nccl": None, "bf16": False, "deepspeed": "0", "transformers": "5",
           "vllm": "missing", "ray": "missing", "gpu": None}
    return {"device": "cpu", "environment": env, "parts": parts}


LEARNER = {"params_m": 1.0, "dtype": "bfloat16", "zero_stage": 2, "rows": 4, "tokens_per_step": 96, "step_s": 0.1,
           "tokens_per_s": 960.0, "mismatch_kl_k3": 1e-3, "all_finite": True, "weights_moved": True, "seconds": 1}
BUS = {"backend": "gloo", "sender_device": "cuda:0", "receiver_device": "cuda:0", "mb": 988.1, "buckets": 4,
       "packing": "hybrid", "send_s": 0.7, "receive_s": 0.68, "mb_per_s": 1411.0, "checksum_match": True,
       "received_on": "cuda:0", "seconds": 17}


def test_table_marks_each_outcome():
    table = gpu.format_table(_result(
        learner_embedded=LEARNER,
        learner_qwen2_0p5b={**LEARNER, "weights_moved": False},
        bus_gloo=BUS,
        bus_nccl={"backend": "nccl", "skipped": gpu.ONE_GPU_NCCL}))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1] for line in table.splitlines()[2:]}
    assert rows["learner: embedded policy"] == "ok"
    assert rows["learner: Qwen2-0.5B shape"] == "FAIL"  # weights that did not move are a failure
    assert rows["weight bus gloo (cuda:0 -> cuda:0)"] == "ok"
    assert rows["weight bus nccl"] == "skipped"


def test_table_names_the_error():
    table = gpu.format_table(_result(bus_gloo={"backend": "gloo", "sender_device": "cpu", "receiver_device": "cpu",
                                               "error": "RuntimeError: bus broke", "seconds": 2},
                                     learner_embedded={**BUS, "checksum_match": False} | {"error": "OOM"}))
    assert "| weight bus gloo (cpu -> cpu) | FAIL | RuntimeError: bus broke |" in table
    assert "| learner: embedded policy | FAIL | OOM |" in table


def test_guard_turns_an_exception_into_a_row():
    out = gpu._guard("boom", lambda: 1 / 0)
    assert out["error"].startswith("ZeroDivisionError") and "trace" in out


@pytest.mark.slow
def test_runs_on_cpu(tmp_path):
    result = gpu.run(out_dir=tmp_path, steps=2, smoke=True)
    parts = result["parts"]
    learner = parts["learner_embedded"]
    assert learner["all_finite"] and learner["weights_moved"], learner
    assert learner["mismatch_kl_k3"] == 0.0  # fp32 learner, fp32 behaviour log-probs of the same weights
    assert parts["bus_gloo"]["checksum_match"], parts["bus_gloo"]
    assert "bus_nccl" not in parts and "learner_qwen2_0p5b" not in parts  # GPU-only parts
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["parts"]["bus_gloo"]["mb"] == parts["bus_gloo"]["mb"]
    assert "FAIL" not in (tmp_path / "gpu_table.md").read_text()
