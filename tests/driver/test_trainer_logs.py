"""A resume at step s drops what the run logged after s, from every per-step log of the run dir."""

import json

from ada_ray.driver.trainer import truncate_logs


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
