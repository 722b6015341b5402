"""Every benchmark in its smoke mode: runs end to end and writes a sane result file."""

from __future__ import annotations

import json
import math
import os

import pytest

from ada_ray.bench.common import BATCH_PROMPTS

pytestmark = pytest.mark.slow


def load(out, name):
    d = json.loads((out / f"{name}.json").read_text())
    assert d["bench"] == name and d["machine"]["cores"] >= 1
    return d


def trained_groups(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["train/groups"] for r in rows if "train/groups" in r}


def test_bench_sync_smoke(tmp_path):
    from ada_ray.bench import weight_sync

    weight_sync.run(out_dir=tmp_path, smoke=True, receivers=1)
    d = load(tmp_path, "sync")
    assert {r["packing"] for r in d["rows"]} == {"per_tensor", "flat", "hybrid"}
    for r in d["rows"]:
        assert r["bus_mb_s"] > 0 and r["flat_mb_s"] > 0 and r["memcpy_mb_s"] > 0 and r["buckets"] >= 1
    assert 0 < d["tiny_policy_best_update_ms"] < 5000
    assert (tmp_path / "sync.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_sampler_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import sampler

    sampler.run(out_dir=tmp_path, smoke=True)
    d = load(tmp_path, "sampler")
    assert d["bare_vllm"]["tokens"] == d["sampler"]["tokens"] > 0  # same prompts and seeds, same samples
    assert d["same_tokens"] and d["pairs"][0]["mismatched_prompts"] == {"bare": 0, "sampler": 0}  # token by token
    assert 0 < d["sampler_vs_bare"] < 5
    assert (tmp_path / "sampler.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_system_and_queue_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import queue, system

    system.run(out_dir=tmp_path, smoke=True)
    d = load(tmp_path, "system")
    assert set(d["rows"]) == {"grpo_async", "ada_seq_balance_async", "ada_seq_balance_sync"}
    for r in d["rows"].values():
        assert r["step_s"] > 0 and r["groups_per_s_overall"] > 0 and 0 <= r["sampler_idle"] <= 1
    assert d["ratios"]["balance_samples_ratio"] > 1  # Seq-balance draws more than GRPO-n4
    assert math.isclose(d["ratios"]["balance_system_premium"],
                        d["ratios"]["balance_step_ratio"] / d["ratios"]["balance_samples_ratio"])
    assert (tmp_path / "system.png").read_bytes()[:4] == b"\x89PNG"
    assert trained_groups(tmp_path / "system_runs" / "grpo_async") == {BATCH_PROMPTS}  # not the default's 64
    queue.run(out_dir=tmp_path, smoke=True)
    q = load(tmp_path, "queue")
    assert q["pure"]["ops_per_s"] > 0 and q["actor"]["calls_per_s"] > 0 and all(sp["total_us_per_item"] > 0 for sp in q["split"])
    assert len(q["training_runs"]) == 3 and all(0 <= r["queue_share"] < 1 for r in q["training_runs"])
    assert (tmp_path / "queue.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_algo_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import algos

    algos.run(out_dir=tmp_path, smoke=True)
    d = load(tmp_path, "algo")
    assert set(d["summary"]) == {"grpo_n4", "ada_seq_balance"}
    for name, runs in d["runs"].items():
        for r in runs:
            assert r["samples"][-1] >= d["budget"]  # stopped on the sample budget
            assert r["samples"] == sorted(r["samples"])
    assert (tmp_path / "algo_reward.png").is_file()


def test_bench_soak_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import soak

    soak.run(out_dir=tmp_path, smoke=True, hog=1)
    d = load(tmp_path, "soak")
    assert d["exit_code"] == 0 and d["leftover_processes"] == []
    roles = {label.split(":")[0] for label in d["processes"]}
    assert {"driver", "queue", "sampler", "learner"} <= roles
    assert sum(1 for label in d["processes"] if label.startswith("sampler:")) == 2  # two samplers
    for p in d["processes"].values():
        assert p["rss_end_mb"] > 10 and p["samples"] >= 1
    assert trained_groups(tmp_path / "soak_run" / "soak") == {BATCH_PROMPTS}
    assert d["object_store"]["samples"] > 0  # the payloads' store is watched too
    assert (tmp_path / "soak_rss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_sampler_refuses_a_gpu_the_cluster_lacks(ray_cluster, tmp_path, capsys):
    from ada_ray.cli import main

    assert main(["bench", "sampler", f"out={tmp_path}", "smoke=true", "sampler.num_gpus=1"]) == 2
    assert "asks for 1 GPU(s) (sampler.num_gpus) but the cluster has 0" in capsys.readouterr().err


def test_bench_paper_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import paper

    d = paper.run(out_dir=tmp_path, smoke=True)
    t = json.loads((tmp_path / "paper_table.json").read_text())
    assert set(t["methods"]) == {"grpo_n4", "ada_seq_balance"} and t["steps"] == d["steps"] == 4
    assert 0 <= t["base"]["avg16"] <= 1 and t["base"]["prompts"] == 4 * 8
    assert sum(b["prompts"] for b in t["base"]["buckets"].values()) == t["base"]["prompts"]
    for name, m in t["methods"].items():
        assert len(m["avg16"]) == len(m["pass16"]) == len(m["samples"]) == 1
        assert all(0 <= a <= p <= 1 for a, p in zip(m["avg16"], m["pass16"]))
        assert m["samples"][0] > 0
    for curves in d["curves"].values():
        for c in curves:
            assert [p["step"] for p in c] == [0, 2, 4]  # the shared base point, then every eval_every steps
            assert c[0]["avg"] == t["base"]["avg16"]
    logged = {n: [json.loads(x)["step"] for x in (tmp_path / "paper_runs" / "runs" / f"{n}_s0" / "eval_per_prompt.jsonl")
                  .read_text().splitlines()] for n in t["methods"]}
    assert logged == {"grpo_n4": [0, 2, 4], "ada_seq_balance": [2, 4]}  # trainer.eval_at_start=false after the first run
    bal = t["methods"]["ada_seq_balance"]
    assert bal["samples"][0] > t["methods"]["grpo_n4"]["samples"][0]  # adaptive rounds draw more per prompt
    assert math.isclose(bal["diff_to_grpo_n4"]["mean"], bal["avg16"][0] - t["methods"]["grpo_n4"]["avg16"][0])
    assert (tmp_path / "paper_eval.png").read_bytes()[:4] == b"\x89PNG"
    assert "ada_seq_balance" in paper.format_table(d)
    # a bench started again with the same parameters resumes: every run's summary is there, nothing retrains
    table_text = (tmp_path / "paper_table.json").read_text()
    (tmp_path / "paper_runs" / "runs").rename(tmp_path / "moved")
    paper.run(out_dir=tmp_path, smoke=True)
    assert not (tmp_path / "paper_runs" / "runs").exists()
    assert (tmp_path / "paper_table.json").read_text() == table_text


def test_bench_scale_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import scale

    scale.run(out_dir=tmp_path, smoke=True)
    d = load(tmp_path, "scale")
    assert [(r["samplers"], r["prompts"], r["shards"], r["transport"], r["relay"]) for r in d["rows"]] == [
        (s, 2000, k, tr, rl) for s in (4, 16) for k in (1, 2) for tr in ("inline", "object_store") for rl in (False, True)]
    for r in d["rows"]:
        assert r["batch"] == max(64, 16 * r["samplers"])  # the step grows with the fan-out
        assert r["items_per_s"] > 0 and r["steps"] >= 1 and r["groups_trained"] == r["batch"] * r["steps"]
        assert r["lease_mode"] == "ride" and r["long_polls"] == 0  # asks ride reports; a call of its own may wait
        assert r["asks_on_reports"] > 0 and r["lease_calls"] >= r["hosts"]
        assert r["accounting_ok"] and r["stale_samples"] == 0  # admission control and accounting hold
        assert 0 < r["lease_p50_ms"] <= r["lease_p99_ms"] and r["queue_cpu_share"] > 0
        assert r["lease_probes"] > 0 and 0 < r["lease_answer_p50_ms"] <= r["lease_answer_p99_ms"]  # answered at once
        assert r["probe_via"] == ("relay" if r["relay"] else "queue")  # the probe asks the way the samplers do
        if r["relay"]:  # the samplers' calls reached the queue through relays, combined
            assert r["queue_stats"]["relayed_calls"] > 0 and r["relay_reports_per_call"] >= 1
            assert r["relay_asks_per_call"] > 0  # a waiting ask goes out again in each long poll: may be < 1
        else:
            assert r["queue_stats"]["relayed_calls"] == 0 and r["relay_asks_per_call"] is None
    assert d["driver_load"][0]["rows"] == 2000 and d["driver_load"][0]["peak_rss_mb"] > 0
    # Ray's floor: a no-op call costs its server CPU, more with 64 items x 8 samples to unpickle
    floor = {f["items"]: f["server_cpu_us_per_call"] for f in d["ray_call_floor"]
             if not f["reference"] and f["form"] == "samples"}
    assert set(floor) == {0, 64} and 0 < floor[0] < floor[64]
    # and with 64 items as samplers report them now and as numpy columns, 64 work items as a lease's answer
    assert {(f["form"], f["items"]) for f in d["ray_call_floor"] if f["form"] != "samples"} == {
        ("blocks", 64), ("lease", 64), ("columns", 64), ("lease_columns", 64)}
    assert all(f["server_cpu_us_per_call"] > 0 for f in d["ray_call_floor"])
    held = [f for f in d["ray_call_floor"] if f["reference"]]
    assert len(held) == 1 and held[0]["items"] == 0 and held[0]["server_cpu_us_per_call"] > 0
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"
    # the bench's earlier lease pattern: an ask answered at once, a long poll after each empty one
    shared_probe = scale.new_probe_actor()  # a run's rows share one probe process; a row leaves it running
    r = scale.run_pair(4, 2000, folder=tmp_path / "scale_data", duration_s=2.0, service_ms=20.0, hosts=2, max_items=64,
                       batch=64, max_staleness=2, transport="object_store", lease_mode="probe", probe_actor=shared_probe)
    assert r["lease_probes"] > 0 and ray_cluster.get(shared_probe.ready.remote(), timeout=60)
    # samplers through relays, the probe asking the queue itself (the queue's own answer time)
    via_queue = scale.run_pair(4, 2000, folder=tmp_path / "scale_data", duration_s=2.0, service_ms=20.0, hosts=2,
                               max_items=64, batch=64, max_staleness=2, transport="object_store", relay=True,
                               probe_actor=shared_probe, probe_via="queue")
    assert via_queue["relay"] and via_queue["probe_via"] == "queue" and via_queue["lease_probes"] > 0
    assert via_queue["accounting_ok"] and via_queue["queue_stats"]["relayed_calls"] > 0
    ray_cluster.kill(shared_probe)
    assert r["lease_mode"] == "probe" and r["accounting_ok"] and r["groups_trained"] > 0
    assert r["lease_calls"] > r["empty_leases"] == r["long_polls"] and r["asks_on_reports"] == 0
    # samplers shaped as the real one (items finishing one by one, a report every engine step), without
    # and with a report interval: the interval gathers several steps' items into one call
    rows = [scale.run_pair(4, 2000, folder=tmp_path / "scale_data", duration_s=3.0, service_ms=200.0, hosts=2,
                           max_items=64, batch=64, max_staleness=2, transport="object_store", finish="engine",
                           step_ms=10.0, report_interval_ms=ri) for ri in (0.0, 200.0)]
    for r in rows:
        assert r["finish"] == "engine" and r["lease_mode"] == "ride" and r["lease_calls"] >= 1
        assert r["accounting_ok"] and r["stale_samples"] == 0 and r["groups_trained"] > 0
    assert rows[1]["items_per_report_call"] > 2 * rows[0]["items_per_report_call"]
    assert "engine (report every 200 ms)" in scale.format_row(rows[1])
    # the queue on a core of its own while the row is measured, every core given back after it
    if len(os.sched_getaffinity(0)) >= 2:
        cores = set(os.sched_getaffinity(0))
        r = scale.run_pair(4, 2000, folder=tmp_path / "scale_data", duration_s=2.0, service_ms=20.0, hosts=2,
                           max_items=64, batch=64, max_staleness=2, transport="object_store", queue_core=True)
        assert r["queue_core"]["queue_cores"] == [min(cores)] and r["queue_core"]["pinned_processes"] >= 3
        assert r["accounting_ok"] and r["groups_trained"] > 0 and r["lease_probes"] > 0
        assert os.sched_getaffinity(0) == cores and "queue-core" in scale.format_row(r)


def test_bench_budget_smoke_and_resume(ray_cluster, tmp_path):
    from ada_ray.bench import budget, levers

    d = budget.run(out_dir=tmp_path, smoke=True)
    t = json.loads((tmp_path / "paper_budget_table.json").read_text())
    assert t["default_method"] == "ada_budget" and t["steps"] == 4
    assert set(t["methods"]) == {"grpo_n4", "ada_budget", "ada_seq_balance", "grpo_n16"}
    for name, m in t["methods"].items():
        for key in ("avg16", "avg16_equal_wall", "avg16_equal_samples", "wall_s_per_step", "samples"):
            assert len(m[key]) == 1 and m[key][0] == m[key][0], (name, key)  # every curve reaches the common budgets
        split = m["time_split_s_per_step"]
        assert split["train"] > 0 and split["sampler_busy"] > 0
        assert sum(b["prompts_per_step"] for b in m["buckets"].values()) == pytest.approx(t["batch"])
    assert t["methods"]["grpo_n4"]["trained_steps"] == [6]  # x1.5 steps, read at 4 for equal steps
    assert t["methods"]["grpo_n4"]["samples"] == [4 * t["batch"] * 4]
    assert "equal_wall" in t["methods"]["ada_budget"]["vs_grpo_n4"]
    assert (tmp_path / "paper_budget.png").read_bytes()[:4] == b"\x89PNG"
    # a second call finds every run's summary and trains nothing
    stamps = {p.name: p.stat().st_mtime for p in (tmp_path / "budget_runs").glob("*_s*.json")}
    budget.run(out_dir=tmp_path, smoke=True)
    assert stamps == {p.name: p.stat().st_mtime for p in (tmp_path / "budget_runs").glob("*_s*.json")}
    assert "ada_budget" in budget.format_table(d)
    lv = levers.run(out_dir=tmp_path, smoke=True)  # reuses the base pass rates measured above
    assert [r["lever"] for r in lv["rows"]] == [x[0] for x in levers.LEVERS]
    assert lv["rows"][0]["samples_per_prompt"] == 4.0


def test_bench_kill_smoke(ray_cluster, tmp_path):
    from ada_ray.bench import kill

    d = kill.run(out_dir=tmp_path, smoke=True, cases="waiting")
    (r,) = d["rows"]
    assert r["case"] == "waiting" and r["replaced"] == 1 and r["accounting_ok"]
    # the learners' fetch fails (the cohort goes back) or reads the dead sampler's objects before Ray frees
    # them (trained: correct too); either way its other samples in the open cohorts are sampled again
    assert r["prompts_reissued"] >= r["returned_prompts"] >= 0
    assert r["cohorts_trained"] == 5 and r["to_next_cohort_s"] > 0
    assert "| waiting |" in kill.format_table(d)
