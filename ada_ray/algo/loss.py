"""The policy loss: decoupled PPO-clip with token-mean aggregation (torch only).

Per token t of response i, with pi = current policy, prox = the policy at the start of the training
step (recomputed by the learner), mu = the behaviour policy that sampled it (log-probs recorded by
the sampler):
    ratio   = pi / prox
    pg      = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
    pg      = min(pg, -A * c)            for A < 0 (dual clip, when dual_clip_c is set)
    w       = min(prox / mu, tis_cap)    (truncated importance weight, detached; 1 when tis_cap null)
    loss_t  = w * pg - entropy_coef * H_t + kl_coef * k3(pi, ref)
token_mean: sum over all tokens / number of tokens (or `num_tokens` when given, for data-parallel
ranks that must share one denominator); seq_mean_token_mean: mean over sequences of per-sequence
token means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip_c: Optional[float] = 10.0
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    tis_cap: Optional[float] = 2.0
    loss_agg: str = "token_mean"

    @classmethod
    def from_algo(cls, algo) -> "LossConfig":
        return cls(algo.clip_low, algo.clip_high, algo.dual_clip_c, algo.entropy_coef, algo.kl_coef,
                   algo.tis_cap, algo.loss_agg)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, num_tokens: Optional[float] = None,
              num_seqs: Optional[float] = None) -> torch.Tensor:
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        denom = num_tokens if num_tokens is not None else mask.sum().clamp(min=1.0)
        return (values * mask).sum() / denom
    if mode == "seq_mean_token_mean":
        per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        denom = num_seqs if num_seqs is not None else max(values.shape[0], 1)
        return per_seq.sum() / denom
    raise ValueError(f"unknown loss_agg {mode!r}")


def policy_loss(
    logprobs: torch.Tensor,
    prox_logprobs: torch.Tensor,
    behaviour_logprobs: Optional[torch.Tensor],
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    entropy: Optional[torch.Tensor] = None,
    ref_logprobs: Optional[torch.Tensor] = None,
    num_tokens: Optional[float] = None,
    num_seqs: Optional[float] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss and metrics. All token tensors are [batch, T]; advantages are [batch] or [batch, T]."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    mask_f = mask.to(logprobs.dtype)
    prox = prox_logprobs.detach()
    log_ratio = (logprobs - prox).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    pg = torch.maximum(pg1, pg2)
    clipped = (pg2 > pg1).to(logprobs.dtype)
    if cfg.dual_clip_c is not None:
        pg3 = -advantages * cfg.dual_clip_c
        dual = (advantages < 0) & (pg > pg3)
        pg = torch.where(advantages < 0, torch.minimum(pg, pg3), pg)
    else:
        dual = torch.zeros_like(mask, dtype=torch.bool)
    if cfg.tis_cap is not None and behaviour_logprobs is not None:
        is_w = torch.exp((prox - behaviour_logprobs.detach()).clamp(-20.0, 20.0))
        truncated = (is_w > cfg.tis_cap).to(logprobs.dtype)
        is_w = is_w.clamp(max=cfg.tis_cap)
        pg = pg * is_w
    else:
        is_w = torch.ones_like(pg)
        truncated = torch.zeros_like(pg)
    per_token = pg
    if cfg.entropy_coef and entropy is not None:
        per_token = per_token - cfg.entropy_coef * entropy
    kl_val = None
    if ref_logprobs is not None:
        d = (ref_logprobs.detach() - logprobs).clamp(-20.0, 20.0)
        kl = torch.exp(d) - d - 1.0  # k3 estimator of KL(pi || ref), >= 0
        kl_val = kl
        if cfg.kl_coef:
            per_token = per_token + cfg.kl_coef * kl
    loss = aggregate(per_token, mask, cfg.loss_agg, num_tokens, num_seqs)

    with torch.no_grad():
        n = mask_f.sum().clamp(min=1.0)

        def mean(x: torch.Tensor) -> float:
            return float((x.to(mask_f.dtype) * mask_f).sum() / n)

        metrics = {
            "pg_loss": mean(pg),
            "clip_frac": mean(clipped),
            "dual_clip_frac": mean(dual),
            "approx_kl_prox": mean(0.5 * log_ratio**2),
            "is_weight_mean": mean(is_w),
            "is_truncated_frac": mean(truncated),
            "tokens": float(mask_f.sum()),
        }
        if entropy is not None:
            metrics["entropy"] = mean(entropy)
        if behaviour_logprobs is not None:
            d = (behaviour_logprobs.detach() - logprobs.detach()).clamp(-20.0, 20.0)
            metrics["kl_behaviour"] = mean(torch.exp(d) - d - 1.0)  # k3 estimate of KL(pi || behaviour)
        if kl_val is not None:
            metrics["kl_ref"] = mean(kl_val)
    return loss, metrics


def token_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                               with_entropy: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log pi(target) and the entropy of pi at each position; logits [B, T, V], targets [B, T].

    The temperature divides the logits, so the learner's log-probs are those of the distribution the
    sampler drew from (vLLM's processed log-probs)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    token_lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = None
    if with_entropy:
        ent = -(logp.exp() * logp).sum(-1)
    return token_lp, ent
