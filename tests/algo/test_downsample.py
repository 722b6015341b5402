from hypothesis import given
from hypothesis import strategies as st

from ada_ray.algo.downsample import balanced_downsample, unfinished_downsample


def test_balanced_takes_first_collected_of_each_side():
    pos = ["p0", "p1", "p2"]
    neg = [f"n{i}" for i in range(21)]
    assert balanced_downsample(pos, neg, 4) == ["p0", "p1", "n0", "n1"]


def test_balanced_tops_up_from_negatives_when_positives_short():
    assert balanced_downsample(["p0"], ["n0", "n1", "n2", "n3"], 4) == ["p0", "n0", "n1", "n2"]


def test_balanced_tops_up_from_positives_when_negatives_short():
    assert balanced_downsample(["p0", "p1", "p2", "p3"], ["n0"], 4) == ["p0", "p1", "p2", "n0"]


def test_balanced_odd_n():
    assert balanced_downsample(["p0", "p1", "p2"], ["n0", "n1", "n2"], 5) == ["p0", "p1", "n0", "n1", "n2"]


def test_unfinished_all_wrong_keeps_n_negatives():
    neg = [f"n{i}" for i in range(32)]
    assert unfinished_downsample([], neg, 4, "balance") == ["n0", "n1", "n2", "n3"]
    assert unfinished_downsample([], neg, 4, "pos") == ["n0", "n1", "n2", "n3"]


def test_unfinished_all_right_keeps_n_positives():
    pos = [f"p{i}" for i in range(32)]
    assert unfinished_downsample(pos, [], 4, "balance") == ["p0", "p1", "p2", "p3"]


def test_unfinished_pos_rule_uses_official_ratio_target():
    # K_pos never reached, 20 of 32 positive: target = clip(ceil(20/32*4), 1, 3) = 3
    pos = [f"p{i}" for i in range(20)]
    neg = [f"n{i}" for i in range(12)]
    assert unfinished_downsample(pos, neg, 4, "pos") == ["p0", "p1", "p2", "n0"]
    assert unfinished_downsample(pos, neg, 4, "balance") == ["p0", "p1", "n0", "n1"]


def test_unfinished_small_pool_keeps_what_there_is():
    assert unfinished_downsample(["p0"], ["n0"], 4, "balance") == ["p0", "n0"]


@given(st.integers(0, 40), st.integers(0, 40), st.integers(1, 16))
def test_balanced_invariants(num_pos, num_neg, n):
    pos = [("p", i) for i in range(num_pos)]
    neg = [("n", i) for i in range(num_neg)]
    kept = balanced_downsample(pos, neg, n)
    assert len(kept) == min(n, num_pos + num_neg)
    assert len(set(kept)) == len(kept)  # no sample used twice
    kp = [k for k in kept if k[0] == "p"]
    kn = [k for k in kept if k[0] == "n"]
    assert kp == pos[: len(kp)] and kn == neg[: len(kn)]  # first-collected prefixes
    assert len(kp) >= min(n // 2, num_pos)  # as balanced as the pool allows
    assert len(kn) >= min(n - n // 2, num_neg)


@given(st.integers(0, 40), st.integers(0, 40), st.integers(1, 16), st.sampled_from(["pos", "balance"]))
def test_unfinished_invariants(num_pos, num_neg, n, kind):
    pos = [("p", i) for i in range(num_pos)]
    neg = [("n", i) for i in range(num_neg)]
    kept = unfinished_downsample(pos, neg, n, kind)
    assert len(kept) == min(n, num_pos + num_neg)
    assert len(set(kept)) == len(kept)
    kp = [k for k in kept if k[0] == "p"]
    kn = [k for k in kept if k[0] == "n"]
    assert kp == pos[: len(kp)] and kn == neg[: len(kn)]
