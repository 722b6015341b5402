"""bench/queue.py's in-process split of the queue's CPU per work item."""

from __future__ import annotations

import gc
import math

import pytest

from ada_ray.bench.queue import format_table, per_item_split


@pytest.mark.parametrize("blocks", [True, False])
def test_per_item_split_covers_every_part_of_an_items_path(blocks):
    sp = per_item_split(prompts=500, batch=16, steps=3, items_per_call=8, blocks=blocks)
    assert sp["report_form"] == ("blocks" if blocks else "samples")
    assert sp["items"] >= 3 * 16  # every prompt of 3 cohorts leased and reported at least once
    assert sp["samples_per_item"] == 8  # Seq-balance's rounds of M = 8
    assert set(sp["us_per_item"]) == {"lease", "lease_pickle", "report_unpickle", "report", "take_cohort",
                                      "cohort_pickle", "open_cohort"}
    assert all(v > 0 for v in sp["us_per_item"].values())
    assert math.isclose(sp["total_us_per_item"], sum(sp["us_per_item"].values()))
    assert gc.get_freeze_count() == 0  # the frozen heap is handed back
    line = format_table({"pure": {"ops_per_s": 1, "groups_per_s": 1}, "actor": {"calls_per_s": 1},
                         "training_runs": [], "split": [sp]})
    assert "queue CPU per work item in process" in line


def test_per_item_split_needs_work_to_lease():
    with pytest.raises(ValueError, match="batch_prompts"):
        per_item_split(prompts=10, batch=16, steps=1)
