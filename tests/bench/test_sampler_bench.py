"""`ada-ray bench sampler`'s bookkeeping (ada_ray/bench/sampler.py), without Ray or vLLM: the run
order (interleaved pairs on CPU, one engine at a time on a GPU), pairing, ratios, and the token-id
comparison that says whether the Sampler generated what bare vLLM did."""

from ada_ray.bench.sampler import format_table, mismatches, pair_up, schedule

BARE = [[[1, 2], [3]], [[4], [5, 6]]]  # two prompts, two samples each


def _run(seconds, token_ids=BARE, **extra):
    tokens = sum(len(t) for p in token_ids for t in p)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "token_ids": token_ids,
            "cpu_s": seconds, **extra}


def test_pairs_interleave_on_cpu_and_run_one_engine_at_a_time_on_a_gpu():
    assert schedule(3, side_by_side=True) == [(0, "bare"), (0, "sampler"), (1, "sampler"), (1, "bare"),
                                              (2, "bare"), (2, "sampler")]
    assert schedule(2, side_by_side=False) == [(0, "bare"), (1, "bare"), (0, "sampler"), (1, "sampler")]


def test_token_ids_differ_by_prompt_sample_order_or_count():
    assert mismatches(BARE, BARE) == 0
    assert mismatches(BARE, [[[1, 2], [3]], [[5, 6], [4]]]) == 1  # same samples, other order
    assert mismatches(BARE, [[[1, 2], [3]], [[4], [5, 7]]]) == 1
    assert mismatches(BARE, BARE[:1]) == 1


def test_pair_up_gives_each_pair_its_order_ratio_and_mismatches():
    plan = schedule(2, side_by_side=True)
    other = [[[1, 2], [3]], [[4], [5, 9]]]
    runs = {(0, "bare"): _run(2.0), (0, "sampler"): _run(2.5, busy_s=2.0),
            (1, "sampler"): _run(2.0, other, busy_s=1.8), (1, "bare"): _run(2.2)}
    pairs = pair_up(plan, runs)
    assert [p["order"] for p in pairs] == [["bare", "sampler"], ["sampler", "bare"]]
    assert [round(p["ratio"], 3) for p in pairs] == [0.8, 1.1]
    assert [p["mismatched_prompts"] for p in pairs] == [{"bare": 0, "sampler": 0}, {"bare": 0, "sampler": 1}]
    assert "token_ids" not in pairs[0]["bare"] and pairs[1]["sampler"]["busy_s"] == 1.8
    table = format_table({"pairs": pairs, "ratio_range": [0.8, 1.1], "sampler": pairs[0]["sampler"],
                          "sampler_vs_bare": 0.95, "repeats": 2, "same_tokens": False})
    assert "| 1 | sampler then bare |" in table and "median 0.950 over 2 pairs (range 0.800-1.100)" in table
    assert "every run: False" in table
