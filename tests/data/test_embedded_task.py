import pytest

from ada_ray.data import embedded_task as et


def test_levels_parse_and_reject():
    assert et.parse_level("3x2") == (3, 2)
    for bad in ("3", "x2", "3x", "1x1", "3x9", "axb"):
        with pytest.raises(ValueError):
            et.parse_level(bad)


def test_splits_deterministic_disjoint_labelled():
    a_tr, a_ev = et.make_splits(["2x1", "2x2", "3x2"], 100, 20, seed=0)
    b_tr, b_ev = et.make_splits(["2x1", "2x2", "3x2"], 100, 20, seed=0)
    assert a_tr == b_tr and a_ev == b_ev
    c_tr, _ = et.make_splits(["2x1", "2x2", "3x2"], 100, 20, seed=1)
    assert c_tr != a_tr
    assert not {x.question for x in a_tr} & {x.question for x in a_ev}
    assert {x.difficulty for x in a_tr} == {"2x1", "2x2", "3x2"}
    assert len({x.prompt_id for x in a_tr}) == len(a_tr)  # no duplicates within a split
    assert sum(1 for x in a_tr if x.difficulty == "2x2") == 100


def test_compact_format_and_answers_are_correct():
    tr, _ = et.make_splits(["3x2"], 50, 0, seed=0)
    for x in tr:
        assert x.question.endswith("=") and " " not in x.question
        assert int(x.answer) == eval(x.question[:-1])  # test-only check of the generator


def test_small_level_gives_fewer_not_duplicates():
    tr, ev = et.make_splits(["2x1"], 500, 50, seed=0)
    assert len(tr) + len(ev) <= 200 and len(tr) <= 150 and len(ev) == 50


def test_scorer_matches_reasoning_gym():
    import reasoning_gym as rg

    ds = rg.create_dataset("chain_sum", min_terms=2, max_terms=2, min_digits=2, max_digits=2,
                           allow_negation=False, seed=3, size=20)
    for i in range(20):
        e = ds[i]
        for cand in (e["answer"], f" {e['answer']} ", str(int(e["answer"]) + 1), "", "abc"):
            assert et.score(cand, e["answer"]) == ds.score_answer(cand, e)


def test_sft_stream_skips_excluded():
    excl = {e.question for e in et.held_out("2x1", 0)}
    stream = et.sft_stream(["2x1"], 0, excl)
    assert not any(next(stream).question in excl for _ in range(3000))


def test_eval_split_independent_of_level_list_and_held_out_from_train():
    _, ev_a = et.make_splits(["2x2", "3x1"], 10, 20, seed=0)
    _, ev_b = et.make_splits(["3x1"], 10, 30, seed=0)
    assert [e for e in ev_a if e.difficulty == "3x1"] == ev_b[:20]  # a prefix of the same held-out pool
    tr, _ = et.make_splits(["3x1"], 500, 5, seed=0)
    held = {e.question for e in et.held_out("3x1", 0)}
    assert not held & {t.question for t in tr}  # never trained on, whatever eval_per_level is
    assert et.distinct_problems("2x1") == 200 and et.held_out_size("2x1") == 50
    _, ev = et.make_splits(["2x1", "3x1"], 10, 120, seed=0)  # a small level gives its whole pool
    assert sum(e.difficulty == "2x1" for e in ev) == 50 and sum(e.difficulty == "3x1" for e in ev) == 120


def test_write_answer_orders():
    assert et.write_answer("86") == "86"
    assert et.write_answer("86", "lsb_first") == "68"
    assert et.write_answer("-29", "lsb_first") == "-92"
    assert et.write_answer("100", "lsb_first") == "001"
    assert et.write_answer("7", "lsb_first") == "7"
    with pytest.raises(ValueError, match="answer order"):
        et.write_answer("1", "backwards")


def test_lsb_splits_are_the_msb_splits_with_reversed_answers():
    tr_m, ev_m = et.make_splits(["3x2"], 30, 10, seed=0)
    tr_l, ev_l = et.make_splits(["3x2"], 30, 10, seed=0, order="lsb_first")
    assert [t.question for t in tr_m] == [t.question for t in tr_l]
    assert [et.write_answer(t.answer, "lsb_first") for t in tr_m + ev_m] == [t.answer for t in tr_l + ev_l]
    item = next(et.sft_stream(["2x2"], 0, set(), "lsb_first"))
    a, b = item.question[:-1].replace("-", "+-").split("+")[:2]
    assert et.write_answer(str(int(a) + int(b)), "lsb_first") == item.answer
