"""Learner actor: one data-parallel rank of the DeepSpeed learner, and (rank 0) the WeightBus sender.

The default process group (gloo on CPU, NCCL on GPU) belongs to DeepSpeed; it is created here
from a TCPStore whose socket we bind to the configured host. The WeightBus is a separate group.
Checkpoint parts go to a folder or a storage URI through ada_ray/storage.py: at a URI every learner
uploads its own part from its own node, and downloads what it loads.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Optional

import ray

from ada_ray import storage
from ada_ray.config import from_dict


@ray.remote
class Learner:
    def __init__(self, rank: int, world_size: int, cfg: dict, model_path: str, use_gpu: bool):
        self.cfg = from_dict(cfg)
        self.rank, self.world_size = rank, world_size
        self.model_path = model_path
        self.use_gpu = use_gpu
        self.version = 0
        self.bus = None
        self.busy_s = 0.0
        self.nonfinite_streak = 0
        self.staged = None  # the share `stage` fetched, for the next train_step(None, ...)

    def write_probe(self, directory: str) -> tuple[str, Optional[str]]:
        """Write `<directory>/learner_<rank>` (a folder or a storage URI) holding this actor's node
        address; return (the address, why it could not be written or None). The driver reads it back:
        a learner whose files the driver cannot see would split every checkpoint across machines."""
        node = ray.util.get_node_ip_address()
        try:
            storage.write_text(storage.join(directory, f"learner_{self.rank}"), node)
        except Exception as exc:  # noqa: BLE001 - reported by the driver, with the node, in one line
            return node, storage.why(exc)
        return node, None

    def address(self, local_only: bool) -> tuple[str, int]:
        """(host, free port) for the default group's store, on this actor's node."""
        import socket

        host = "127.0.0.1" if local_only else ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return host, s.getsockname()[1]

    def setup(self, master_addr: str, master_port: int, local_only: bool) -> int:
        """Join the learners' default group and build the DeepSpeed engine."""
        import torch

        from ada_ray.algo.loss import LossConfig
        from ada_ray.learner.core import LearnerCore, make_deepspeed_engine, set_local_dist_env, skip_deepspeed_shm_build

        if not self.use_gpu:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            torch.set_num_threads(max(1, int(self.cfg.learner.num_cpus)))
            if local_only:
                os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        set_local_dist_env(self.rank, self.world_size, master_addr, master_port)
        skip_deepspeed_shm_build()
        self._init_default_group(master_addr, master_port, self.use_gpu)
        import deepspeed
        from transformers import AutoModelForCausalLM

        deepspeed.init_distributed(dist_backend="nccl" if self.use_gpu else "gloo", auto_mpi_discovery=False)
        lc = self.cfg.learner
        use_bf16 = lc.dtype == "bfloat16" or (lc.dtype == "auto" and self.use_gpu)
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.use_gpu else torch.device("cpu")
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        if lc.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        ref = None
        if self.cfg.algo.kl_coef > 0:
            ref = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).to(self.device).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
        self.engine = make_deepspeed_engine(model, lc, self.cfg.trainer.total_steps, use_bf16)
        self.core = LearnerCore(self.engine, LossConfig.from_algo(self.cfg.algo), self.pad_id,
                                self.cfg.sampler.temperature, lc.micro_batch_size, self.device, ref)
        return self.rank

    def _init_default_group(self, addr: str, port: int, use_gpu: bool) -> None:
        import torch.distributed as dist

        from ada_ray.sync.process_group import bound_listen_socket, make_store

        timeout = self.cfg.weight_sync.timeout_s
        if self.rank == 0:
            sock = bound_listen_socket(addr, port)
            store = make_store(addr, port, self.world_size, True, timeout, sock)
            sock.detach()
        else:
            store = make_store(addr, port, self.world_size, False, timeout)
        from datetime import timedelta

        dist.init_process_group("nccl" if use_gpu else "gloo", store=store, rank=self.rank,
                                world_size=self.world_size, timeout=timedelta(seconds=timeout))

    # -- training ---------------------------------------------------------------------------------

    def stage(self, minibatches: list, timeout_s: float = 600.0) -> list[str]:
        """Fetch the payloads this share's rows name (one call for all of them) and keep the share for
        `train_step(None, ...)`. [] when everything came; else the owners whose batches are lost (nothing
        is kept: no learner trains, the cohort goes back to the queue)."""
        from ada_ray.actors.ray_payloads import RayPayloadStore
        from ada_ray.algo.payloads import LostPayloads
        from ada_ray.learner.batching import fill_rows, share_batches

        self.staged = None
        batches = share_batches(minibatches)
        if batches:
            try:
                fill_rows(minibatches, RayPayloadStore().fetch(batches, timeout_s))
            except LostPayloads as e:
                return e.owners
        self.staged = minibatches
        return []

    def train_step(self, minibatches: Optional[list], version: int) -> dict:
        """minibatches: [(rows as dicts, global tokens, global seqs)], or None for the share `stage` fetched;
        returns metrics."""
        from ada_ray.learner.core import Row

        if minibatches is None:
            if self.staged is None:
                raise RuntimeError(f"learner {self.rank}: train_step(None) with no staged share (call stage first)")
            minibatches, self.staged = self.staged, None
        t0 = time.perf_counter()
        batches = [([Row(**r) for r in rows], tok, seqs) for rows, tok, seqs in minibatches]
        metrics = self.core.train(batches, self.world_size)
        self.version = version + 1
        if metrics["nonfinite_minibatches"] >= len(batches):
            self.nonfinite_streak += 1
        else:
            self.nonfinite_streak = 0
        metrics["nonfinite_streak"] = float(self.nonfinite_streak)
        self.busy_s += time.perf_counter() - t0
        metrics["train_seconds"] = time.perf_counter() - t0
        return metrics

    def logprobs(self, rows: list) -> list:
        from ada_ray.learner.core import Row

        return self.core.logprobs([Row(**r) for r in rows])

    # -- weight bus (rank 0 sends; ZeRO-3 ranks all gather) -------------------------------------

    def bus_open(self, world_size: int, host: str) -> tuple[str, int]:
        from ada_ray.sync.process_group import bus_backend
        from ada_ray.sync.weight_bus import WeightBusSender

        ws = self.cfg.weight_sync
        backend = bus_backend(ws.backend, self.cfg.sampler.num_gpus > 0, self.use_gpu, ws.colocated)
        if self.bus is not None:
            self.bus.close()
        self.bus = WeightBusSender(world_size, backend, host, ws.port, ws.bucket_mb, ws.packing, ws.timeout_s)
        return self.bus.address

    def bus_connect(self) -> None:
        self.bus.connect()

    def _named_params(self):
        return [(n, p.data) for n, p in self.engine.module.named_parameters()]

    def weight_meta(self, version: int) -> dict:
        from ada_ray.sync.weight_bus import TensorSpec

        # ZeRO-3 partitions hold no data (shape [0]) until gathered; ds_shape is the full shape
        specs = [TensorSpec(n, tuple(getattr(p, "ds_shape", p.shape)), str(p.dtype))
                 for n, p in self.engine.module.named_parameters()]
        return self.bus.meta_from_specs(specs, version)

    def bus_send(self, meta: dict) -> dict:
        if self.cfg.learner.zero_stage != 3:
            return self.bus.send(self._named_params(), meta)
        # ZeRO-3: gather one bucket at a time (a collective: every rank runs this loop), rank 0
        # broadcasts it, and it is partitioned again on leaving the block - never the whole model at once
        import deepspeed

        params = dict(self.engine.module.named_parameters())
        t0, nbytes = time.perf_counter(), 0
        for bucket in meta["buckets"]:
            group = [params[name] for name, _, _ in bucket]
            with deepspeed.zero.GatheredParameters(group, modifier_rank=None):
                if self.rank == 0:
                    nbytes += self.bus.send_bucket({name: params[name].data for name, _, _ in bucket}, bucket,
                                                   meta["packing"])
        if self.rank != 0:
            return {}
        return {"bytes": nbytes, "seconds": time.perf_counter() - t0, "buckets": len(meta["buckets"])}

    def bus_close(self) -> None:
        if self.bus is not None:
            self.bus.close()
            self.bus = None

    def stats(self) -> dict:
        return {"busy_s": self.busy_s, "version": self.version}

    def param_checksum(self) -> float:
        return float(sum(p.detach().double().sum() for p in self.engine.module.parameters()))

    # -- checkpoints ------------------------------------------------------------------------------

    def save_checkpoint(self, directory: Optional[str], tag: str, hf_dir: Optional[str], tokenizer_from: str) -> bool:
        """DeepSpeed state (every rank; none when `directory` is None) and, from rank 0, the policy in HF
        format (safetensors). Each is a folder or a storage URI: for a URI this rank writes its files
        on its own node's disk and uploads them itself (ada_ray.storage.writing)."""
        import deepspeed

        staging = self.cfg.trainer.staging_dir
        if directory is not None:
            with storage.writing(directory, staging) as local:
                self.engine.save_checkpoint(str(local), tag=tag, client_state={"version": self.version})
        if hf_dir is None:
            return True
        params = list(self.engine.module.parameters())
        gather = (deepspeed.zero.GatheredParameters(params, modifier_rank=None) if self.cfg.learner.zero_stage == 3
                  else contextlib.nullcontext())
        # rank 0 writes inside the gather and uploads after it (the other ranks need not wait for the upload)
        with storage.writing(hf_dir, staging) if self.rank == 0 else contextlib.nullcontext() as local, gather:
            if self.rank == 0:
                from transformers import AutoTokenizer

                self.engine.module.save_pretrained(str(local), safe_serialization=True)
                AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(str(local))
        return True

    def load_checkpoint(self, directory: str, tag: str) -> int:
        """Load a DeepSpeed checkpoint from a folder or a URI (copied down to this node first: every
        rank reads the whole `directory`, as ZeRO-1/2 loads every rank's optimizer partition)."""
        with storage.reading(directory, self.cfg.trainer.staging_dir) as local:
            _, client = self.engine.load_checkpoint(str(local), tag=tag, load_optimizer_states=True,
                                                    load_lr_scheduler_states=True)
        if client is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} in {directory}")
        self.version = int(client.get("version", 0))
        return self.version
