"""prepare-data: the pass-rate band, the written file, resume after an interruption, and the
difficulty memory seeded from the written pass rates. The generation engine here is a scripted
stand-in (the real vLLM path is tests/integration/test_prepare_data.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ada_ray.algo.scheduler import WorkScheduler
from ada_ray.config import AlgoConfig, ConfigError, load_config
from ada_ray.data.datasets import DataError, load_splits
from ada_ray.prepare_data import Band, prepare, read_scores, scores_path
from ada_ray.engines.vllm_engine import Completion
from ada_ray.rewards import SafeScorer


def test_band_worked_examples():
    standard, hard = Band(0.313, 1), Band(0.125, 1)
    assert standard.keeps(5, 16) and not standard.keeps(6, 16)  # 0.3125 in, 0.375 out
    assert hard.keeps(2, 16) and not hard.keeps(3, 16)  # 0.125 in, 0.1875 out
    assert not standard.keeps(0, 16)  # at least one correct
    assert Band(0.0, 0).keeps(0, 8)  # all-wrong prompts only, if asked for


class CharTok:
    chat_template = None

    def __call__(self, text):
        if isinstance(text, list):
            return {"input_ids": [self(t)["input_ids"] for t in text]}
        return {"input_ids": [1] + [ord(c) % 50 for c in text]}


class ScriptedEngine:
    """Prompt i (by first-seen order of its text) gets `correct[text]` right answers out of k."""

    def __init__(self, correct: dict[str, int], answers: dict[str, str], fail_after: int | None = None):
        self.tokenizer = CharTok()
        self.correct, self.answers = correct, answers
        self.by_ids = {}
        self.calls = 0
        self.prompts_generated = 0
        self.fail_after = fail_after

    def generate(self, prompts, n, seeds, temperature=None, max_tokens=None):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed mid-run")
        self.calls += 1
        self.prompts_generated += len(prompts)
        out = []
        for ids in prompts:
            text = self.by_ids[tuple(ids)]
            c = self.correct[text]
            out.append([Completion([5], [0.0], self.answers[text] if j < c else "wrong", "stop") for j in range(n)])
        return out


def dataset(tmp_path: Path, n: int = 10) -> tuple[Path, dict, dict]:
    rows, correct, answers = [], {}, {}
    for i in range(n):
        q = f"{i}+{i}="
        rows.append({"uid": f"q{i}", "question": q, "answer": str(2 * i), "level": f"L{i % 2}"})
        correct[q], answers[q] = i % 9, str(2 * i)  # 0..8 correct of 16
    p = tmp_path / "math.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p, correct, answers


def cfg_for(tmp_path: Path, data: Path, **extra):
    ov = {"data.source": "jsonl", "data.train_path": str(data), "data.id_field": "uid", "data.difficulty_field": "level",
          "data.max_prompt_tokens": 32, "prepare.samples_per_prompt": 16, "prepare.chunk_prompts": 3,
          "prepare.output": str(tmp_path / "out" / "prepared.jsonl"), "trainer.progress": "off"}
    ov.update(extra)
    return load_config("default", [f"{k}={v}" for k, v in ov.items()])


def engine_for(cfg, correct, answers, **kw):
    eng = ScriptedEngine(correct, answers, **kw)
    for text in correct:
        from ada_ray.data.datasets import render_prompt

        eng.by_ids[tuple(render_prompt(text, cfg.data, eng.tokenizer))] = text
    return eng


def test_prepare_keeps_the_band_and_writes_pass_rates(tmp_path):
    data, correct, answers = dataset(tmp_path)
    cfg = cfg_for(tmp_path, data)
    eng = engine_for(cfg, correct, answers)
    s = prepare(cfg, lambda: eng, lambda: SafeScorer("exact"), log=lambda *_: None)
    rows = [json.loads(line) for line in Path(s["output"]).read_text().splitlines()]
    # i % 9 correct of 16: kept when 1 <= c <= 5 (0.3125): i = 1..5
    assert [r["uid"] for r in rows] == ["q1", "q2", "q3", "q4", "q5"]
    assert [r["pass_rate"] for r in rows] == [c / 16 for c in (1, 2, 3, 4, 5)]
    assert rows[0]["level"] == "L1" and rows[0]["question"] == "1+1=" and rows[0]["num_samples"] == 16
    assert s["scored"] == 10 and s["kept"] == 5 and s["histogram"]["0"] == pytest.approx(0.2)  # i = 0 and 9
    assert eng.prompts_generated == 10 and eng.calls == 4  # chunks of 3
    # the written file trains as is, and its pass rates become the difficulty memory
    tcfg = load_config("default", s["train_overrides"] + ["data.question_field=question", "data.max_prompt_tokens=32"])
    train, _ = load_splits(tcfg.data, CharTok())
    assert [p.prior_pass_rate for p in train.prompts] == [c / 16 for c in (1, 2, 3, 4, 5)]
    assert [p.prompt_id for p in train.prompts] == ["q1", "q2", "q3", "q4", "q5"]


def test_prepare_resumes_where_it_was_interrupted(tmp_path):
    data, correct, answers = dataset(tmp_path)
    cfg = cfg_for(tmp_path, data)
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, lambda: engine_for(cfg, correct, answers, fail_after=2), lambda: SafeScorer("exact"),
                log=lambda *_: None)
    out = Path(cfg.prepare.output)
    assert not out.exists() and len(read_scores(scores_path(out), 16)) == 6  # two chunks of 3 recorded
    # a torn last line (killed mid-write) is dropped and that prompt scored again
    with open(scores_path(out), "a") as fh:
        fh.write('{"prompt_id": "q6", "num_co')
    eng = engine_for(cfg, correct, answers)
    s = prepare(cfg, lambda: eng, lambda: SafeScorer("exact"), log=lambda *_: None)
    assert eng.prompts_generated == 4 and s["resumed"] == 6
    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    cfg2 = cfg_for(fresh_dir, data)
    s2 = prepare(cfg2, lambda: engine_for(cfg2, correct, answers), lambda: SafeScorer("exact"), log=lambda *_: None)
    assert Path(s["output"]).read_text() == Path(s2["output"]).read_text()  # same file as uninterrupted
    # all scored already: nothing generated, no engine made
    s3 = prepare(cfg, lambda: pytest.fail("no engine needed"), lambda: SafeScorer("exact"), log=lambda *_: None)
    assert s3["kept"] == 5


def test_prepare_refuses_scores_made_with_another_k(tmp_path):
    data, correct, answers = dataset(tmp_path)
    cfg = cfg_for(tmp_path, data)
    prepare(cfg, lambda: engine_for(cfg, correct, answers), lambda: SafeScorer("exact"), log=lambda *_: None)
    cfg8 = cfg_for(tmp_path, data, **{"prepare.samples_per_prompt": 8})
    with pytest.raises(DataError, match=r"prepared.jsonl.scores.jsonl:1: scored with 16 samples per prompt, but "
                                        r"prepare.samples_per_prompt = 8"):
        prepare(cfg8, lambda: None, lambda: SafeScorer("exact"), log=lambda *_: None)


def test_prepare_says_when_nothing_is_kept(tmp_path):
    data, correct, answers = dataset(tmp_path)
    cfg = cfg_for(tmp_path, data, **{"prepare.max_pass_rate": 0.0625, "prepare.min_correct": 1})
    zero = {q: 0 for q in correct}
    with pytest.raises(DataError, match="no prompt of 10 scored has a pass rate <= 0.0625"):
        prepare(cfg, lambda: engine_for(cfg, zero, answers), lambda: SafeScorer("exact"), log=lambda *_: None)


def test_prepare_config_errors():
    with pytest.raises(ConfigError, match="prepare.min_correct"):
        load_config("default", ["prepare.min_correct=17"])
    with pytest.raises(ConfigError, match="no prompt can pass the filter"):
        load_config("default", ["prepare.min_correct=6", "prepare.max_pass_rate=0.3"])
    with pytest.raises(ConfigError, match="prepare.max_pass_rate"):
        load_config("default", ["prepare.max_pass_rate=1.5"])


def test_bad_pass_rate_field(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "1+1=", "answer": "2", "pass_rate": 0.5}\n{"question": "2+2=", "answer": "4", "pass_rate": "hi"}\n')
    cfg = load_config("default", ["data.source=jsonl", f"data.train_path={p}", "data.pass_rate_field=pass_rate"])
    with pytest.raises(DataError, match=rf"{p}:2: field 'pass_rate' \(data.pass_rate_field\) must be a number in \[0, 1\]"):
        load_splits(cfg.data, CharTok())


def test_offline_pass_rates_seed_the_difficulty_memory(tmp_path):
    """hardest_first with prepare-data's pass rates: the first cohort is the hardest prompts from
    step one (without them every prompt starts at the prior and the order is the shuffle)."""
    p = tmp_path / "d.jsonl"
    rates = [0.5, 0.0625, 0.25, 0.125, 0.3125, 0.1875]
    p.write_text("".join(json.dumps({"id": f"p{i}", "question": f"{i}+0=", "answer": str(i), "pass_rate": r}) + "\n"
                         for i, r in enumerate(rates)))
    cfg = load_config("default", ["data.source=jsonl", f"data.train_path={p}", "data.pass_rate_field=pass_rate",
                                  "data.id_field=id", "algo.name=grpo"])
    train, _ = load_splits(cfg.data, CharTok())
    s = WorkScheduler(train.prompts, cfg.algo, batch_prompts=2, prompt_order="hardest_first")
    first = {item.prompt_id for item in s.ready}  # cohort 0: the work items ready to lease
    assert first == {"p1", "p3"}
    est = s.estimator.estimate("p1")
    assert est == pytest.approx((8 * 0.0625 + 1.0) / (8 + 1.0 + 16.0))  # prior worth algo.prior_weight samples
    off = WorkScheduler(train.prompts, AlgoConfig(name="grpo", prior_weight=0.0), batch_prompts=2,
                        prompt_order="hardest_first")
    assert not off.estimator.seen("p1")
