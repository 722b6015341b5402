"""The learner's training step on a DeepSpeed engine (used by the Learner actor; no Ray here).

One call trains on this rank's share of a cohort: the share is split into `mini_batches` parts
(one optimizer step each, PPO style); the proximal log-probs are recomputed once with the weights
at the start of the step; each part runs in micro-batches of `micro_batch_size` sequences whose
losses are token-means over the part's GLOBAL token count (all ranks), so data-parallel gradient
averaging gives exactly the token-mean of the whole mini-batch. Gradient accumulation is the
caller-owned kind (``managed_gradient_accumulation: false``): backward only accumulates and
``step()`` reduces and updates, so the number of micro-batches may vary from step to step.
A non-finite loss on any rank skips the optimizer step on every rank (counted). `train` gets the
proximal and reference log-probs from one function (`completion_logprobs`, policy or reference
model) and runs `_train_minibatch` (one optimizer step) per part.
"""

from __future__ import annotations

import enum
import os
import pickle
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch

from ada_ray.algo.loss import LossConfig, policy_loss, token_logprobs_and_entropy


@dataclass
class Row:
    prompt: list[int]
    completion: list[int]
    behaviour_logprobs: list[float]
    advantage: float
    version: int

    @property
    def span(self) -> slice:
        """The target positions whose next token is a completion token (see pad_rows)."""
        lo = len(self.prompt) - 1
        return slice(lo, lo + len(self.completion))


@dataclass
class _StepTotals:
    """What one train() call accumulates over its mini-batches, in order."""

    sums: dict[str, float] = field(default_factory=dict)  # metric x tokens; "loss": loss x token denominator
    tokens: float = 0.0
    skipped: int = 0  # mini-batches whose optimizer step was skipped (non-finite loss on some rank)
    grad_norms: list[float] = field(default_factory=list)


def skip_deepspeed_shm_build() -> None:
    """DeepSpeed JIT-compiles a shared-memory comm op on first init (~65 s of g++); gloo does the
    same job here, so skip the build."""
    import importlib

    importlib.import_module("deepspeed.comm.torch")
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None


def pad_rows(rows: list[Row], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """input ids, attention mask, targets, completion mask (over target positions), behaviour lp.

    Targets are the next tokens: position t predicts input t+1. The completion mask selects the
    positions whose target is a completion token."""
    width = max(len(r.prompt) + len(r.completion) for r in rows)
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    att = torch.zeros((n, width), dtype=torch.long)
    cmask = torch.zeros((n, width - 1), dtype=torch.float32)
    blp = torch.zeros((n, width - 1), dtype=torch.float32)
    for i, r in enumerate(rows):
        seq = r.prompt + r.completion
        ids[i, : len(seq)] = torch.tensor(seq)
        att[i, : len(seq)] = 1
        cmask[i, r.span] = 1.0
        if r.behaviour_logprobs:
            blp[i, r.span] = torch.tensor(r.behaviour_logprobs, dtype=torch.float32)
    targets = ids[:, 1:]
    return ids.to(device), att.to(device), targets.to(device), cmask.to(device), blp.to(device)


def sequence_logprobs(model, rows: list[Row], pad_id: int, temperature: float, device, with_entropy: bool):
    ids, att, targets, cmask, blp = pad_rows(rows, pad_id, device)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
    lp, ent = token_logprobs_and_entropy(logits, targets, temperature, with_entropy)
    return lp, ent, cmask, blp


def chunks(seq: list, size: int) -> list[list]:
    return [seq[i:i + size] for i in range(0, len(seq), size)] or [[]]


class LearnerCore:
    def __init__(self, engine, loss_cfg: LossConfig, pad_id: int, temperature: float, micro_batch_size: int,
                 device, ref_model=None):
        self.engine = engine
        self.loss_cfg = loss_cfg
        self.pad_id = pad_id
        self.temperature = temperature
        self.micro = micro_batch_size
        self.device = device
        self.ref_model = ref_model

    @torch.no_grad()
    def completion_logprobs(self, model, rows: list[Row]) -> list[list[float]]:
        """Per-token log-probs of each row's completion under `model`, in micro-batches."""
        out = []
        for part in chunks(rows, self.micro):
            if not part:
                continue
            lp, _, _, _ = sequence_logprobs(model, part, self.pad_id, self.temperature, self.device, False)
            out += [lp[i, r.span].float().cpu().tolist() for i, r in enumerate(part)]
        return out

    def logprobs(self, rows: list[Row]) -> list[list[float]]:
        """Per-token log-probs of each row's completion under the current weights."""
        self.engine.module.eval()
        return self.completion_logprobs(self.engine.module, rows)

    def _any_rank(self, flag: bool) -> bool:
        import torch.distributed as dist

        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(t)
        return bool(t.item() > 0)

    def train(self, minibatches: list[tuple[list[Row], float, float]], world_size: int) -> dict[str, float]:
        """minibatches: [(this rank's rows, global token count, global sequence count)] - one
        optimizer step each."""
        engine = self.engine
        # proximal log-probs: the policy at the start of this step, for every row of every part. With
        # one mini-batch the weights have not moved when it is trained, so they equal the current
        # log-probs (detached) and the extra forward pass is skipped (None).
        single = len(minibatches) == 1
        prox_all = [None] if single else [self.logprobs(rows) if rows else [] for rows, _, _ in minibatches]
        ref_all: list = [None] * len(minibatches)
        if self.ref_model is not None:
            ref_all = [self.completion_logprobs(self.ref_model, rows) if rows else [] for rows, _, _ in minibatches]
        engine.module.train()
        totals = _StepTotals()
        for j, (rows, global_tokens, global_seqs) in enumerate(minibatches):
            self._train_minibatch(rows, None if single else prox_all[j], ref_all[j],
                                  max(global_tokens, 1.0) / world_size, max(global_seqs, 1.0) / world_size, totals)
        out = {k: v / max(totals.tokens, 1.0) for k, v in totals.sums.items() if k != "loss"}
        out["loss"] = totals.sums.get("loss", 0.0) / max(sum(g for _, g, _ in minibatches), 1.0) * world_size
        out["tokens"] = totals.tokens
        out["nonfinite_minibatches"] = float(totals.skipped)
        out["grad_norm"] = sum(totals.grad_norms) / len(totals.grad_norms) if totals.grad_norms else float("nan")
        out["lr"] = float(engine.get_lr()[0]) if hasattr(engine, "get_lr") else float("nan")
        return out

    def _train_minibatch(self, rows: list[Row], prox_lp: Optional[list[list[float]]],
                         ref_lp: Optional[list[list[float]]], denom: float, seq_denom: float,
                         totals: _StepTotals) -> None:
        """One optimizer step on this rank's rows of one mini-batch, in micro-batches.

        prox_lp / ref_lp: each row's proximal / reference completion log-probs (prox_lp None: the
        current weights', detached). denom / seq_denom: this rank's share of the mini-batch's
        global token / sequence count. A non-finite loss on any rank skips the step everywhere."""
        engine = self.engine
        bad = False
        parts = chunks(list(range(len(rows))), self.micro) if rows else [[]]
        for idx in parts:
            if not idx:  # no rows for this rank: contribute zero gradients, keep collectives in step
                loss = sum((p * 0.0).sum() for p in engine.module.parameters() if p.requires_grad)
                engine.backward(loss, scale_wrt_gas=False)
                continue
            part = [rows[i] for i in idx]
            lp, ent, cmask, blp = sequence_logprobs(engine.module, part, self.pad_id, self.temperature,
                                                    self.device, True)
            prox = lp.detach() if prox_lp is None else torch.zeros_like(lp)
            ref = torch.zeros_like(lp) if ref_lp is not None else None
            for k, i in enumerate(idx):
                if prox_lp is not None:
                    prox[k, part[k].span] = torch.tensor(prox_lp[i], device=self.device)
                if ref is not None:
                    ref[k, part[k].span] = torch.tensor(ref_lp[i], device=self.device)
            adv = torch.tensor([r.advantage for r in part], dtype=lp.dtype, device=self.device)
            has_behaviour = all(len(r.behaviour_logprobs) == len(r.completion) for r in part)
            loss, m = policy_loss(lp, prox, blp if has_behaviour else None, adv, cmask, self.loss_cfg,
                                  entropy=ent, ref_logprobs=ref, num_tokens=denom, num_seqs=seq_denom)
            if not torch.isfinite(loss):
                bad = True
                continue
            engine.backward(loss, scale_wrt_gas=False)
            w = m["tokens"]
            totals.tokens += w
            for key, v in m.items():
                if key != "tokens":
                    totals.sums[key] = totals.sums.get(key, 0.0) + v * w
            totals.sums["loss"] = totals.sums.get("loss", 0.0) + float(loss.detach()) * denom
        if self._any_rank(bad):
            engine.zero_grad()
            if hasattr(engine.optimizer, "zero_grad"):
                engine.optimizer.zero_grad()  # ZeRO keeps its own gradient buffers
            totals.skipped += 1
            return
        local_norm = self._local_grad_norm()
        engine.step()
        gn = engine.get_global_grad_norm()
        totals.grad_norms.append(float(gn) if gn is not None else local_norm)

    @torch.no_grad()
    def _local_grad_norm(self) -> float:
        """Norm of this rank's accumulated gradient (ZeRO-0 keeps no global norm; with several ranks
        this is the RMS over ranks of their local norms)."""
        import torch.distributed as dist

        sq = torch.zeros((), dtype=torch.float64, device=self.device)
        for p in self.engine.module.parameters():
            if p.grad is not None:
                sq += p.grad.detach().double().pow(2).sum()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(sq)
            sq /= dist.get_world_size()
        return float(sq.sqrt())


def make_deepspeed_engine(model, lcfg, total_steps: int, use_bf16: bool):
    """DeepSpeed engine around `model` with a torch AdamW (no JIT-compiled optimizer) and a
    linear warm-up schedule."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lcfg.lr, betas=tuple(lcfg.betas), weight_decay=lcfg.weight_decay)
    warm = max(0, lcfg.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        # clipping also makes DeepSpeed compute the global grad norm (a metric); "off" = a huge bound
        "gradient_clipping": lcfg.grad_clip if lcfg.grad_clip > 0 else 1e12,
        "zero_optimization": {"stage": lcfg.zero_stage},
        "bf16": {"enabled": bool(use_bf16)},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=sched, config=ds_config)
    engine.checkpoint_engine = weights_only_checkpoint_engine(engine._config)
    return engine


def _enums_to_values(obj):
    """The state dict with every enum member replaced by its value. Containers holding no enum are
    returned as they are (a module's state dict keeps its OrderedDict type and `_metadata`)."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        items = {k: _enums_to_values(v) for k, v in obj.items()}
        if all(items[k] is v for k, v in obj.items()):
            return obj
        out = obj.copy()  # same type (OrderedDict, ...), then the changed values
        out.update(items)
        return out
    if type(obj) in (list, tuple):
        items = [_enums_to_values(v) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    return obj


def weights_only_checkpoint_engine(ds_config=None):
    """DeepSpeed's torch checkpoint engine, except that it loads with ``torch.load(weights_only=True)``
    (DeepSpeed's own passes ``weights_only=False``): a checkpoint file may hold tensors, plain
    containers and three DeepSpeed record types (ZeRO's stage enum, its fragment addresses, the
    loss-scaler's settings), never code to run. Saving writes enum members as their plain values:
    some Python builds pickle an enum member as ``getattr(EnumClass, name)``, and ``getattr`` is
    not something a weights-only load may call."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    records = [LossScaler, ZeroStageEnum, fragment_address]

    class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
        def save(self, state_dict, path: str):
            return super().save(_enums_to_values(state_dict), path)

        def load(self, path: str, map_location=None):
            try:
                with torch.serialization.safe_globals(records):
                    return torch.load(path, map_location=map_location, weights_only=True)
            except pickle.UnpicklingError as exc:
                raise pickle.UnpicklingError(f"{path}: refused to load: it holds more than tensors and plain "
                                             f"containers (torch.load weights_only=True): {str(exc)[:300]}") from None

    return WeightsOnlyCheckpointEngine(ds_config)


def set_local_dist_env(rank: int, world_size: int, master_addr: str, master_port: int) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
                       "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port)})


def init_single_rank_group(device: torch.device) -> None:
    """torch.distributed's default group of one rank (DeepSpeed needs one), made as the Learner actor
    makes its group: from a TCPStore on a socket we bind to 127.0.0.1 (a store torch binds itself listens on
    every interface). It stays for the process's life: DeepSpeed's comm layer keeps a handle to it,
    so destroying it would break a later DeepSpeed engine in the same process."""
    import torch.distributed as dist

    from ada_ray.sync.process_group import bound_listen_socket, make_store

    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    skip_deepspeed_shm_build()
    import deepspeed

    if dist.is_initialized():
        return
    sock = bound_listen_socket("127.0.0.1")
    port = sock.getsockname()[1]
    set_local_dist_env(0, 1, "127.0.0.1", port)
    store = make_store("127.0.0.1", port, 1, True, 120.0, sock)
    sock.detach()  # the store owns the listening fd now
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=0, world_size=1)
    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo", auto_mpi_discovery=False)
