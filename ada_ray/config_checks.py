"""Validation of a loaded config: every impossible value or combination is one ConfigError naming
the key and what was expected, before anything starts (`validate`, called by config.load_config).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from ada_ray.config_schema import (ADA_SEQ, CHOICES, AdaRayConfig, AlgoConfig, ConfigError, DataConfig, LearnerConfig,
                                   PrepareConfig, SamplerConfig, TrainerConfig, WarmStartConfig, WeightSyncConfig)
from ada_ray.knob_defaults import effective_k_neg, effective_k_pos
from ada_ray.levels import HELD_OUT_PER_LEVEL, parse_level

# sampler.report_interval_s: finished work held longer than this is a round's worth of a generation kept
# from the queue (the next round of its prompt waits for it); a typo (e.g. ms for s) is refused
MAX_REPORT_INTERVAL_S = 10.0

# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------


def _err(key: str, expected: str, got: Any) -> ConfigError:
    return ConfigError(f"config: '{key}' must be {expected} (got {got!r})")


def _positive(key: str, value: Any, strict: bool = True) -> None:
    """Raise unless value > 0 (strict) or >= 0."""
    if value is None or (value <= 0 if strict else value < 0):
        raise _err(key, "> 0" if strict else ">= 0", value)


def _validate_choices(cfg: AdaRayConfig) -> None:
    """Every enumerated knob (CHOICES) holds one of its allowed values."""
    for key, allowed in CHOICES.items():
        value = OmegaConf.select(OmegaConf.structured(cfg), key)
        if value not in allowed:
            raise _err(key, f"one of {', '.join(allowed)}", value)


def _validate_algo(a: AlgoConfig) -> None:
    """algo: group size, rounds, the variant's own knobs, then the loss."""
    _positive("algo.n", a.n)
    if a.name in ("grpo", "dapo") and a.n < 2:
        raise _err("algo.n", f">= 2 for {a.name} (a group of one has no baseline)", a.n)
    if a.name in ("ada_seq_balance", "ada_budget") and a.n < 2:
        raise _err("algo.n", f">= 2 for {a.name} (it keeps n/2 positives and n/2 negatives)", a.n)
    if a.samples_per_round < 1:
        raise _err("algo.samples_per_round", ">= 1", a.samples_per_round)
    if a.max_rounds < 1:
        raise _err("algo.max_rounds", ">= 1", a.max_rounds)
    if a.name in ADA_SEQ:
        _validate_ada_seq(a)
    if not 0.0 <= a.positive_threshold < 1.0 + 1e-9:
        raise _err("algo.positive_threshold", "in [0, 1]", a.positive_threshold)
    if a.name == "ada_est":
        _validate_ada_est(a)
    if a.name == "dapo" and a.dapo_max_draws_factor < 1.0:
        raise _err("algo.dapo_max_draws_factor", ">= 1", a.dapo_max_draws_factor)
    _validate_loss(a)


def _validate_ada_seq(a: AlgoConfig) -> None:
    """ada_seq_*: the sample budget M x R can reach n and K_pos + K_neg."""
    budget = a.samples_per_round * a.max_rounds
    if budget < a.n:
        raise ConfigError(
            f"config: the sample budget algo.samples_per_round x algo.max_rounds = "
            f"{a.samples_per_round} x {a.max_rounds} = {budget} is below algo.n = {a.n}"
        )
    kp, kn = effective_k_pos(a), effective_k_neg(a)
    if kp < 0 or kn < 0:
        raise _err("algo.k_pos/algo.k_neg", ">= 0", (kp, kn))
    if kp + kn > budget:
        raise ConfigError(
            f"config: algo.k_pos + algo.k_neg = {kp + kn} can never be reached with at most "
            f"{budget} samples (algo.samples_per_round x algo.max_rounds)"
        )
    if a.name == "ada_seq_pos" and kp < 1:
        raise _err("algo.k_pos", ">= 1 for ada_seq_pos", kp)
    if a.name == "ada_budget":
        _validate_ada_budget(a, kp + kn)


def _validate_ada_budget(a: AlgoConfig, k_total: int) -> None:
    """ada_budget: the per-prompt cap reaches n and K_pos + K_neg; probabilities in range; a prior > 0."""
    if a.budget_max_samples < max(a.n, k_total):
        raise _err("algo.budget_max_samples", f">= algo.n and >= algo.k_pos + algo.k_neg ({max(a.n, k_total)})",
                   a.budget_max_samples)
    if not 0.0 < a.settle_target < 1.0:
        raise _err("algo.settle_target", "in (0, 1)", a.settle_target)
    if not 0.0 <= a.park_below < 1.0:
        raise _err("algo.park_below", "in [0, 1)", a.park_below)
    if not 0.0 < a.explore_floor <= 1.0:
        raise _err("algo.explore_floor", "in (0, 1] (0 would park a prompt for good)", a.explore_floor)
    if a.probe_samples and not a.n <= a.probe_samples <= a.budget_max_samples:
        raise _err("algo.probe_samples", f"0 (park) or in [algo.n, algo.budget_max_samples] ([{a.n}, "
                   f"{a.budget_max_samples}])", a.probe_samples)
    if len(a.budget_prior) != 2 or not all(x > 0 for x in a.budget_prior):
        raise _err("algo.budget_prior", "two numbers > 0 ([a0, b0] of the Beta prior)", list(a.budget_prior))


def _validate_ada_est(a: AlgoConfig) -> None:
    """ada_est: per-prompt sample bounds, their mean, and the estimator's prior."""
    if a.est_n_min < 1:
        raise _err("algo.est_n_min", ">= 1", a.est_n_min)
    if a.est_n_max < a.est_n_min:
        raise _err("algo.est_n_max", f">= algo.est_n_min ({a.est_n_min})", a.est_n_max)
    if not a.est_n_min <= a.est_mean_samples <= a.est_n_max:
        raise _err(
            "algo.est_mean_samples", f"within [algo.est_n_min, algo.est_n_max] = [{a.est_n_min}, {a.est_n_max}]",
            a.est_mean_samples,
        )
    if a.est_n_min < 2:
        raise _err("algo.est_n_min", ">= 2 (a prompt with one sample has no baseline)", a.est_n_min)
    _positive("algo.est_alpha", a.est_alpha)
    _positive("algo.est_beta", a.est_beta)
    if not 0.0 < a.est_lambda <= 1.0:
        raise _err("algo.est_lambda", "in (0, 1]", a.est_lambda)


def _validate_loss(a: AlgoConfig) -> None:
    """algo's loss knobs: clip range, dual clip, TIS cap and coefficients."""
    if not 0.0 < a.clip_low < 1.0:
        raise _err("algo.clip_low", "in (0, 1)", a.clip_low)
    _positive("algo.clip_high", a.clip_high)
    if a.dual_clip_c is not None and a.dual_clip_c <= 1.0:
        raise _err("algo.dual_clip_c", "> 1 or null", a.dual_clip_c)
    if a.tis_cap is not None and a.tis_cap < 1.0:
        raise _err("algo.tis_cap", ">= 1 or null", a.tis_cap)
    _positive("algo.entropy_coef", a.entropy_coef, strict=False)
    _positive("algo.prior_weight", a.prior_weight, strict=False)
    _positive("algo.kl_coef", a.kl_coef, strict=False)


def _validate_data(d: DataConfig) -> None:
    """data: prompt length, verifier timeout, and paths matching data.source."""
    _positive("data.max_prompt_tokens", d.max_prompt_tokens)
    _positive("data.reward_timeout_s", d.reward_timeout_s)
    if d.source != "embedded" and not d.train_path:
        raise _err("data.train_path", f"a path for data.source={d.source}", d.train_path)
    if d.source == "embedded" and (d.train_path or d.eval_path):
        raise ConfigError(f"config: data.{'train' if d.train_path else 'eval'}_path is set, but data.source = embedded "
                          "(the built-in task) ignores it; set data.source=jsonl, parquet or hf_disk")


def _check_levels(key: str, levels, expected: str) -> None:
    for lv in levels:
        try:
            parse_level(lv)
        except ValueError as exc:
            raise _err(key, f"{expected} ({exc})", list(levels)) from None


def _validate_warmstart(ws: WarmStartConfig) -> None:
    """model.warmstart: TxD levels and a positive stop step."""
    _check_levels("model.warmstart.levels", ws.levels, "a list of TxD levels")
    if ws.stop_at_step is not None:
        _positive("model.warmstart.stop_at_step", ws.stop_at_step)


def _validate_embedded(d: DataConfig) -> None:
    """data, embedded task: TxD levels and per-level split sizes within the held-out pool."""
    _check_levels("data.levels", d.levels, "a list of TxD levels such as 2x1")
    if not d.levels:
        raise _err("data.levels", "a non-empty list", list(d.levels))
    _positive("data.train_per_level", d.train_per_level)
    _positive("data.eval_per_level", d.eval_per_level, strict=False)
    if d.eval_per_level > HELD_OUT_PER_LEVEL:
        raise _err("data.eval_per_level", f"<= {HELD_OUT_PER_LEVEL} (a level's held-out pool; small levels such "
                   "as 2x1 give fewer)", d.eval_per_level)


def _validate_sampler(s: SamplerConfig, d: DataConfig) -> None:
    """sampler: counts, sampling parameters, context length (prompt + completion) and resources."""
    _positive("sampler.num_samplers", s.num_samplers)
    _positive("sampler.max_new_tokens", s.max_new_tokens)
    _positive("sampler.max_num_seqs", s.max_num_seqs)
    _positive("sampler.temperature", s.temperature, strict=False)
    if not 0.0 < s.top_p <= 1.0:
        raise _err("sampler.top_p", "in (0, 1]", s.top_p)
    if d.max_prompt_tokens + s.max_new_tokens > s.max_model_len:
        raise ConfigError(
            f"config: data.max_prompt_tokens + sampler.max_new_tokens = {d.max_prompt_tokens} + "
            f"{s.max_new_tokens} exceeds sampler.max_model_len = {s.max_model_len}"
        )
    _positive("sampler.num_cpus", s.num_cpus, strict=False)
    _positive("sampler.num_gpus", s.num_gpus, strict=False)
    if not 0.0 < s.gpu_memory_utilization <= 1.0:
        raise _err("sampler.gpu_memory_utilization", "in (0, 1]", s.gpu_memory_utilization)
    _positive("sampler.tensor_parallel_size", s.tensor_parallel_size)
    _positive("sampler.lease_timeout_s", s.lease_timeout_s)
    _positive("sampler.start_timeout_s", s.start_timeout_s)
    if s.report_interval_s is not None and not 0.0 <= s.report_interval_s <= MAX_REPORT_INTERVAL_S:
        raise _err("sampler.report_interval_s", f"in [0, {MAX_REPORT_INTERVAL_S:g}] seconds", s.report_interval_s)
    _check_resources("sampler.resources", s.resources)


def _validate_learner(lr: LearnerConfig) -> None:
    """learner: counts, optimizer, ZeRO stage, batching and the non-finite guard."""
    _positive("learner.num_learners", lr.num_learners)
    _positive("learner.lr", lr.lr)
    if len(lr.betas) != 2 or not all(0.0 <= b < 1.0 for b in lr.betas):
        raise _err("learner.betas", "two numbers in [0, 1)", list(lr.betas))
    if lr.zero_stage not in (0, 1, 2, 3):
        raise _err("learner.zero_stage", "0, 1, 2 or 3", lr.zero_stage)
    _positive("learner.micro_batch_size", lr.micro_batch_size)
    _positive("learner.mini_batches", lr.mini_batches)
    _positive("learner.grad_clip", lr.grad_clip, strict=False)
    _positive("learner.max_nonfinite_steps", lr.max_nonfinite_steps)
    _check_resources("learner.resources", lr.resources)


def _check_resources(key: str, resources: dict) -> None:
    for name, amount in resources.items():
        if name in ("CPU", "GPU", "memory"):
            raise _err(key, f"custom resources only ({name} has its own key: num_cpus / num_gpus)", dict(resources))
        _positive(f"{key}.{name}", amount)


def _validate_weight_sync(w: WeightSyncConfig, s: SamplerConfig, lr: LearnerConfig) -> None:
    """weight_sync: bucket size, port, timeout, and the colocated layout's pairing and GPU shares."""
    _positive("weight_sync.bucket_mb", w.bucket_mb)
    if w.colocated:
        if s.num_samplers != lr.num_learners:
            raise ConfigError(f"config: weight_sync.colocated pairs sampler i with learner i: sampler.num_samplers = "
                              f"{s.num_samplers} must equal learner.num_learners = {lr.num_learners}")
        if w.backend == "nccl":
            raise _err("weight_sync.backend", "auto or gloo with weight_sync.colocated (NCCL cannot hold two ranks "
                       "on one GPU)", w.backend)
        if s.tensor_parallel_size != 1:
            raise _err("sampler.tensor_parallel_size", "1 with weight_sync.colocated", s.tensor_parallel_size)
        if s.num_gpus + lr.num_gpus > 1.0 + 1e-9:
            raise ConfigError(f"config: weight_sync.colocated puts a sampler and a learner on one GPU: sampler.num_gpus "
                              f"+ learner.num_gpus = {s.num_gpus} + {lr.num_gpus} must be <= 1 (e.g. 0.5 + 0.5)")
    if not 0 <= w.port <= 65535:
        raise _err("weight_sync.port", "in [0, 65535] (0: any free port)", w.port)
    _positive("weight_sync.timeout_s", w.timeout_s)


def _validate_trainer(t: TrainerConfig, lr: LearnerConfig) -> None:
    """trainer: step and batch sizes (every learner gets a group), staleness, stop rules, cadences."""
    _positive("trainer.total_steps", t.total_steps)
    _positive("trainer.batch_prompts", t.batch_prompts)
    if t.batch_prompts < lr.num_learners:
        raise ConfigError(
            f"config: trainer.batch_prompts = {t.batch_prompts} is below learner.num_learners = "
            f"{lr.num_learners}: every learner needs at least one group per step"
        )
    _positive("trainer.queue_shards", t.queue_shards)
    if t.batch_prompts < t.queue_shards:
        raise ConfigError(
            f"config: trainer.batch_prompts = {t.batch_prompts} is below trainer.queue_shards = "
            f"{t.queue_shards}: every queue shard needs at least one prompt per step"
        )
    if lr.mini_batches > t.batch_prompts:
        raise _err("learner.mini_batches", f"<= trainer.batch_prompts ({t.batch_prompts})", lr.mini_batches)
    if t.max_staleness < 0:
        raise _err("trainer.max_staleness", ">= 0", t.max_staleness)
    if t.total_samples is not None and t.total_samples < 1:
        raise _err("trainer.total_samples", ">= 1 or null", t.total_samples)
    if t.total_epochs is not None and t.total_epochs < 1:
        raise _err("trainer.total_epochs", ">= 1 or null", t.total_epochs)
    _positive("trainer.eval_every", t.eval_every, strict=False)
    _positive("trainer.eval_samples", t.eval_samples)
    _positive("trainer.save_every", t.save_every, strict=False)
    _positive("trainer.max_restarts", t.max_restarts, strict=False)


def _validate_prepare(pr: PrepareConfig) -> None:
    """prepare: samples per prompt and a pass-rate filter some prompt can pass."""
    _positive("prepare.samples_per_prompt", pr.samples_per_prompt)
    if not 0.0 <= pr.max_pass_rate <= 1.0:
        raise _err("prepare.max_pass_rate", "in [0, 1]", pr.max_pass_rate)
    if not 0 <= pr.min_correct <= pr.samples_per_prompt:
        raise _err("prepare.min_correct", f"in [0, prepare.samples_per_prompt = {pr.samples_per_prompt}]",
                   pr.min_correct)
    if pr.min_correct > pr.max_pass_rate * pr.samples_per_prompt:
        raise ConfigError(
            f"config: no prompt can pass the filter: prepare.min_correct = {pr.min_correct} correct of "
            f"prepare.samples_per_prompt = {pr.samples_per_prompt} is a pass rate above prepare.max_pass_rate = "
            f"{pr.max_pass_rate}")
    _positive("prepare.chunk_prompts", pr.chunk_prompts)
    if pr.temperature is not None:
        _positive("prepare.temperature", pr.temperature, strict=False)


def validate(cfg: AdaRayConfig) -> None:
    """Raise ConfigError for the first impossible setting found (sections checked in this order)."""
    _validate_choices(cfg)
    _validate_algo(cfg.algo)
    _validate_data(cfg.data)
    _validate_warmstart(cfg.model.warmstart)
    if cfg.data.source == "embedded":
        _validate_embedded(cfg.data)
    _validate_sampler(cfg.sampler, cfg.data)
    _validate_learner(cfg.learner)
    _validate_weight_sync(cfg.weight_sync, cfg.sampler, cfg.learner)
    _validate_trainer(cfg.trainer, cfg.learner)
    _validate_prepare(cfg.prepare)
