"""The learner's DeepSpeed step, in-process (world size 1, gloo, CPU): it moves log-probs in the
direction of the advantages, skips a non-finite step, and keeps data-parallel denominators."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from ada_ray.algo.loss import LossConfig
from ada_ray.config import LearnerConfig
from ada_ray.learner.core import LearnerCore, Row, _StepTotals, init_single_rank_group, make_deepspeed_engine, pad_rows


@pytest.fixture(scope="module")
def ds_world():
    """One gloo rank, its store bound to 127.0.0.1; kept for the process (DeepSpeed holds a handle)."""
    init_single_rank_group(torch.device("cpu"))
    yield


def _core(lr=1e-2, micro=4, with_ref=False, **loss_kw):
    """A tiny Qwen2 policy on DeepSpeed; with_ref: its reference model is a frozen copy of the start weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=20, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, bos_token_id=1))
    ref = copy.deepcopy(model).eval() if with_ref else None
    engine = make_deepspeed_engine(model, LearnerConfig(lr=lr, grad_clip=0.0), 10, False)
    return LearnerCore(engine, LossConfig(dual_clip_c=None, tis_cap=None, **loss_kw), 0, 1.0, micro,
                       torch.device("cpu"), ref_model=ref)


def _mean_lp(core, rows):
    return [sum(x) / len(x) for x in core.logprobs(rows)]


def test_pad_rows_masks_only_completion_targets():
    rows = [Row([1, 5, 6], [7, 2], [-0.1, -0.2], 1.0, 0), Row([1, 5], [9], [-0.3], -1.0, 0)]
    ids, att, targets, cmask, blp = pad_rows(rows, 0, "cpu")
    assert ids.tolist() == [[1, 5, 6, 7, 2], [1, 5, 9, 0, 0]]
    assert att.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert cmask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]  # positions predicting completion tokens
    assert targets[0, 2:4].tolist() == [7, 2] and targets[1, 1].item() == 9
    assert blp[0, 2:4].tolist() == pytest.approx([-0.1, -0.2])


def test_row_span_is_the_targets_of_its_completion():
    assert Row([1, 5, 6], [7, 2], [], 0.0, 0).span == slice(2, 4)  # positions 2, 3 predict tokens 7, 2
    assert Row([1], [9], [], 0.0, 0).span == slice(0, 1)


def test_one_logprob_function_for_policy_and_reference(ds_world):
    """completion_logprobs is what logprobs (policy) and the reference use: a reference copied from
    the policy gives the policy's numbers, one per completion token, whatever the micro-batch size."""
    rows = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0), Row([1, 4], [9, 2], [], -1.0, 0), Row([1], [3, 4, 5, 2], [], 0.0, 0)]
    core = _core(with_ref=True)
    policy = core.logprobs(rows)
    assert [len(x) for x in policy] == [3, 2, 4] and all(v < 0 for x in policy for v in x)
    assert core.completion_logprobs(core.ref_model, rows) == policy
    one_by_one = _core(micro=1).logprobs(rows)  # no padding across rows
    assert all(a == pytest.approx(b, abs=1e-5) for a, b in zip(one_by_one, policy))


def test_reference_kl_is_zero_while_the_policy_is_the_reference(ds_world):
    """The reference log-probs land on the same token positions as the training forward pass's."""
    core = _core(with_ref=True, kl_coef=0.1)
    rows = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0), Row([1, 4], [9, 2], [], -1.0, 0)]
    m = core.train([(rows, 5.0, 2.0)], world_size=1)
    assert m["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    m = core.train([(rows, 5.0, 2.0)], world_size=1)  # the policy has moved away from its copy
    assert m["kl_ref"] > 1e-6


def test_minibatch_step_accumulates_or_skips(ds_world):
    core = _core()
    core.engine.module.train()
    totals = _StepTotals()
    rows = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0), Row([1, 4], [9, 2], [], -1.0, 0)]
    steps = core.engine.global_steps
    core._train_minibatch(rows, None, None, 5.0, 2.0, totals)
    assert (totals.tokens, totals.skipped, len(totals.grad_norms)) == (5.0, 0, 1)
    assert core.engine.global_steps == steps + 1 and totals.grad_norms[0] > 0
    loss_sum = totals.sums["loss"]
    before = [p.detach().clone() for p in core.engine.module.parameters()]
    core._train_minibatch([Row([1, 5], [7, 2], [], float("nan"), 0)], None, None, 2.0, 1.0, totals)
    assert (totals.tokens, totals.skipped, len(totals.grad_norms)) == (5.0, 1, 1)  # nothing added
    assert totals.sums["loss"] == loss_sum and core.engine.global_steps == steps + 1
    assert all(torch.equal(a, b) for a, b in zip(core.engine.module.parameters(), before))


def test_step_moves_logprobs_with_the_advantage(ds_world):
    core = _core()
    pos = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0), Row([1, 4, 6], [9, 2], [], 1.0, 0)]
    neg = [Row([1, 5, 6], [10, 11, 2], [], -1.0, 0), Row([1, 4, 6], [12, 2], [], -1.0, 0)]
    rows = pos + neg
    before_p, before_n = _mean_lp(core, pos), _mean_lp(core, neg)
    tokens = sum(len(r.completion) for r in rows)
    for _ in range(3):
        m = core.train([(rows, float(tokens), float(len(rows)))], world_size=1)
    after_p, after_n = _mean_lp(core, pos), _mean_lp(core, neg)
    assert all(a > b for a, b in zip(after_p, before_p))
    assert all(a < b for a, b in zip(after_n, before_n))
    assert m["nonfinite_minibatches"] == 0 and math.isfinite(m["grad_norm"]) and m["tokens"] == tokens


def test_zero_advantage_changes_nothing(ds_world):
    core = _core()
    rows = [Row([1, 5, 6], [7, 8, 2], [], 0.0, 0)]
    before = [p.detach().clone() for p in core.engine.module.parameters()]
    core.train([(rows, 3.0, 1.0)], world_size=1)
    after = list(core.engine.module.parameters())
    assert all(torch.allclose(a, b) for a, b in zip(after, before))


def test_nonfinite_loss_skips_the_step(ds_world):
    core = _core()
    rows = [Row([1, 5, 6], [7, 8, 2], [], float("nan"), 0)]
    before = [p.detach().clone() for p in core.engine.module.parameters()]
    m = core.train([(rows, 3.0, 1.0)], world_size=1)
    assert m["nonfinite_minibatches"] == 1
    assert all(torch.equal(a, b) for a, b in zip(core.engine.module.parameters(), before))
    good = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0)]
    m = core.train([(good, 3.0, 1.0)], world_size=1)  # the next step trains normally
    assert m["nonfinite_minibatches"] == 0
    assert not all(torch.equal(a, b) for a, b in zip(core.engine.module.parameters(), before))


def test_mini_batches_each_step_the_optimizer(ds_world):
    core = _core()
    rows = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0), Row([1, 4, 6], [9, 2], [], -1.0, 0)]
    steps_before = core.engine.global_steps
    core.train([(rows[:1], 3.0, 1.0), (rows[1:], 2.0, 1.0)], world_size=1)
    assert core.engine.global_steps == steps_before + 2


class _NotATensor:
    def __reduce__(self):
        return (print, ("this would run at load time",))


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_checkpoints_load_weights_only(ds_world, tmp_path, zero_stage):
    """DeepSpeed state saves and loads back exactly, through a loader that unpickles no code; a
    checkpoint file holding anything but tensors and plain containers is refused."""
    import pickle

    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=20, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, bos_token_id=1))
    engine = make_deepspeed_engine(model, LearnerConfig(lr=1e-2, grad_clip=0.0, zero_stage=zero_stage), 10, False)
    core = LearnerCore(engine, LossConfig(dual_clip_c=None, tis_cap=None), 0, 1.0, 4, torch.device("cpu"))
    rows = [Row([1, 5, 6], [7, 8, 2], [], 1.0, 0)]
    core.train([(rows, 3.0, 1.0)], world_size=1)  # optimizer state exists
    engine.save_checkpoint(str(tmp_path), tag="t", client_state={"version": 3})
    for f in (tmp_path / "t").glob("*.pt"):  # enum members are saved as values (no getattr to unpickle)
        assert "builtins.getattr" not in torch.serialization.get_unsafe_globals_in_checkpoint(str(f))
    saved = [p.detach().clone() for p in engine.module.parameters()]
    core.train([(rows, 3.0, 1.0)], world_size=1)
    assert any(not torch.equal(a, p) for a, p in zip(saved, engine.module.parameters()))
    _, client = engine.load_checkpoint(str(tmp_path), tag="t", load_optimizer_states=True, load_lr_scheduler_states=True)
    assert client["version"] == 3
    assert all(torch.equal(a, p) for a, p in zip(saved, engine.module.parameters()))
    bad = tmp_path / "evil.pt"
    torch.save({"state": _NotATensor()}, bad)
    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        engine.checkpoint_engine.load(str(bad))
