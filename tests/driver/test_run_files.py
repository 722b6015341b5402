"""driver/run_files.py: the run dir's own logs; a resume at step s drops what they logged after s."""

import json

from ada_ray.driver.run_files import truncate_logs


def test_truncate_logs_keeps_what_the_resumed_step_had(tmp_path):
    def write(name, steps):
        (tmp_path / name).write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))

    write("metrics.jsonl", [0, 1, 2, 3, 4])
    write("trained_prompts.jsonl", [0, 1, 2, 3])
    write("eval_per_prompt.jsonl", [0, 2, 4])
    truncate_logs(tmp_path, 2)

    def steps(name):
        return [json.loads(x)["step"] for x in (tmp_path / name).read_text().splitlines()]

    assert steps("metrics.jsonl") == [0, 1, 2]
    assert steps("trained_prompts.jsonl") == [0, 1]  # trained_prompts rows are the step being trained
    assert steps("eval_per_prompt.jsonl") == [0, 2]


def test_the_trained_log_appends_after_a_truncate_while_open(tmp_path):
    from tests.driver.fakes import cohort

    from ada_ray.driver.run_files import RunFiles

    with RunFiles(tmp_path) as files:
        for s in range(4):
            files.record_trained(s, cohort(s))
        files.truncate(2)  # a restart resumes at step 2 with the log still open
        files.record_trained(2, cohort(2))
    rows = [json.loads(x) for x in (tmp_path / "trained_prompts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["prompts"] == ["p2-0", "p2-1"]
    assert files.write_accounting({"issued": 3}).read_text().startswith("{")


def test_the_trained_log_says_where_each_prompts_samples_went(tmp_path):
    from tests.driver.fakes import cohort

    from ada_ray.driver.run_files import RunFiles

    with RunFiles(tmp_path) as files:
        files.record_trained(0, cohort(0, prompts=2, samples_each=4))
    row = json.loads((tmp_path / "trained_prompts.jsonl").read_text())
    assert row["pool"] == [4, 4] and row["pos"] == [2, 2] and row["rounds"] == [1, 1]
    assert row["fired"] == [True, True] and row["skipped"] == 0
