"""`ada-ray bench sampler`: the Sampler actor's generated tokens/s against bare `vllm.LLM.generate`
with the same engine settings, sampling parameters (n, temperature, max tokens, seeds, behaviour
log-probs) and prompts, each in a Ray actor with the same resources. The Sampler's number includes
everything it adds: leasing from the PromptQueue, continuous batching, scoring, reporting.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import ray

from ada_ray.bench.common import bar_chart, write_result
from ada_ray.config import load_config, to_dict


@ray.remote
class BareVLLM:
    def __init__(self, model_path: str, cfg: dict, env: dict, use_gpu: bool = False):
        os.environ.update(env)
        from ada_ray.config import from_dict
        from ada_ray.engines.vllm_engine import VLLMEngine

        # the same engine arguments as the Sampler actor's
        self.engine = VLLMEngine(model_path, from_dict(cfg).sampler, "auto" if use_gpu else "float32", gpu=use_gpu)

    def run(self, prompts: list, n: int, seeds: list) -> dict:
        llm = self.engine.llm
        params = [self.engine.sampling_params(n, s) for s in seeds]
        t0 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        dt = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
        return {"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt}


def run(out_dir: Path = Path("results"), smoke: bool = False, overrides: list[str] | None = None) -> dict:
    from transformers import AutoTokenizer

    from ada_ray.driver import cluster as cl
    from ada_ray.actors.prompt_queue import PromptQueue
    from ada_ray.actors.sampler import Sampler
    from ada_ray.algo.scheduler import item_seed
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path

    n_prompts = 32 if smoke else 512
    cfg = load_config("grpo", ["algo.n=8", f"trainer.batch_prompts={n_prompts}", "trainer.total_steps=1",
                               "trainer.max_staleness=0"] + list(overrides or []))
    model_path = resolve_model_path(cfg)
    tok = AutoTokenizer.from_pretrained(model_path)
    train_set, _ = load_splits(cfg.data, tok)
    c = cl.connect(cfg)
    try:
        use_gpu = cfg.sampler.num_gpus > 0  # e.g. sampler.num_gpus=1 on a GPU machine (jobs/gpu_smoke.sh)
        env = cl.sampler_env(cfg, use_gpu)
        d = to_dict(cfg)
        opts = {"num_cpus": cfg.sampler.num_cpus, "num_gpus": cfg.sampler.num_gpus * cfg.sampler.tensor_parallel_size,
                "runtime_env": {"env_vars": dict(cl.BASE_ENV, **env)}}
        if opts["num_gpus"] > c.resources.get("GPU", 0.0):  # refuse at once rather than wait for a GPU forever
            raise cl.ResourceError(f"bench sampler asks for {opts['num_gpus']:g} GPU(s) (sampler.num_gpus) but the "
                                   f"cluster has {c.resources.get('GPU', 0.0):g}")
        q = PromptQueue.options(num_cpus=0).remote(train_set.prompts, d)
        # the cohort the queue will hand out: read it back to give bare vLLM the same prompts and seeds
        state = ray.get(q.state_dict.remote())
        ids = state["cohorts"][0]["admitted"]
        by_id = {p.prompt_id: p for p in train_set.prompts}
        prompts = [list(by_id[i].token_ids) for i in ids]
        seeds = [item_seed(cfg.trainer.seed, i, 0, 0) for i in ids]

        bare = BareVLLM.options(**opts).remote(model_path, d, env, use_gpu)
        ray.get(bare.run.remote(prompts[:8], cfg.algo.n, seeds[:8]))  # warm-up
        bare_res = ray.get(bare.run.remote(prompts, cfg.algo.n, seeds))
        ray.kill(bare)

        sampler = Sampler.options(**opts).remote("bench", d, model_path, q, use_gpu, 0, env)
        ray.get(sampler.ready.remote())
        # the same warm-up as bare vLLM's (8 prompts through the same engine), outside the timing
        ray.get(sampler.evaluate.remote(prompts[:8], [by_id[i].answer for i in ids[:8]], cfg.algo.n,
                                        cfg.sampler.temperature, 0))
        st0 = ray.get(sampler.stats.remote())
        t0 = time.perf_counter()
        ray.get(sampler.start_sampling.remote())
        cohort = ray.get(q.wait_cohort.remote(0, 3600))
        dt = time.perf_counter() - t0
        tokens = sum(len(s.completion_ids) for g in cohort.groups for s in g.samples)
        st = ray.get(sampler.stats.remote())
        ours = {"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt,
                "engine_step_s": st["busy_s"] - st0["busy_s"], "idle_s": st["idle_s"] - st0["idle_s"],
                "engine_steps": st["steps"] - st0["steps"]}
        ray.get(q.stop.remote())
        ray.get(sampler.stop.remote())
        ray.kill(sampler)
        ray.kill(q)
    finally:
        c.shutdown()
    result = {"prompts": n_prompts, "n": cfg.algo.n, "bare_vllm": bare_res, "sampler": ours,
              "sampler_vs_bare": ours["tokens_per_s"] / bare_res["tokens_per_s"]}
    write_result(out_dir, "sampler", result)
    bar_chart(out_dir / "sampler.png", f"generated tokens/s, {n_prompts} prompts x {cfg.algo.n}", "tokens/s",
              {"bare vllm.LLM.generate": {"tokens/s": bare_res["tokens_per_s"]},
               "ada_ray Sampler": {"tokens/s": ours["tokens_per_s"]}})
    return result


def format_table(result: dict) -> str:
    b, s = result["bare_vllm"], result["sampler"]
    return (f"| engine | tokens | seconds | tokens/s |\n| --- | --- | --- | --- |\n"
            f"| bare vllm.LLM.generate | {b['tokens']} | {b['seconds']:.2f} | {b['tokens_per_s']:.0f} |\n"
            f"| ada_ray Sampler (queue, scoring, reports) | {s['tokens']} | {s['seconds']:.2f} | "
            f"{s['tokens_per_s']:.0f} |\n\nSampler / bare: {result['sampler_vs_bare']:.3f}")
