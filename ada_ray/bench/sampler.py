"""`ada-ray bench sampler`: the Sampler actor's generated tokens/s against bare `vllm.LLM.generate`
with the same engine settings, sampling parameters (n, temperature, max tokens, seeds, behaviour
log-probs) and prompts, each in a Ray actor with the same resources. The Sampler's number includes
everything it adds: leasing from the PromptQueue, continuous batching, scoring, reporting.

Machines are noisy (2 cores shared with other work), so both actors live side by side and run
`repeats` interleaved pairs (bare first in even pairs, the Sampler first in odd ones); the ratio is
the median of the pairs' ratios, with its range. Before each Sampler run the PromptQueue is reset
to its starting state, so every run generates the same cohort from the same seeds; every run's token
ids are compared, prompt by prompt and sample by sample, with bare vLLM's first run (`same_tokens`).
Both clocks cover the same work: bare's builds the sampling parameters and generates; the
Sampler's runs from `start_sampling` until the queue holds the whole cohort (reading the cohort
into the driver, like returning bare's outputs, is outside). Each side's CPU seconds on its engine
thread are recorded too: unlike wall time they hardly move with what else the machine runs.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import ray

from ada_ray.bench.common import bar_chart, write_result
from ada_ray.config import load_config, to_dict

RPC_TIMEOUT_S = 600.0  # any one call of the bench (an engine start, one timed run)
# the Sampler's own accounting of a run (SamplerLoop.stats): on the loop thread, engine steps, idle,
# adding leased work to the engine, CPU seconds; the feeder's lease calls; on the report pipeline's
# thread, scoring, report calls and its CPU seconds
LOOP_STATS = ("busy_s", "idle_s", "lease_s", "cpu_s", "steps", "lease_calls", "score_s", "report_s", "report_calls",
              "report_cpu_s")
PAUSE_SETTLE_S = 1.5  # > LeaseFeeder.lease_wait_s: a paused sampler's last long-poll lease has returned


@ray.remote
class BareVLLM:
    def __init__(self, model_path: str, cfg: dict, env: dict, use_gpu: bool = False):
        os.environ.update(env)
        from ada_ray.config import from_dict
        from ada_ray.engines.vllm_engine import VLLMEngine

        # the same engine arguments as the Sampler actor's
        self.engine = VLLMEngine(model_path, from_dict(cfg).sampler, "auto" if use_gpu else "float32", gpu=use_gpu)

    def run(self, prompts: list, n: int, seeds: list) -> dict:
        """Timed generate; token ids per prompt, each prompt's samples in output-index order."""
        llm = self.engine.llm
        cpu0, t0 = time.thread_time(), time.perf_counter()
        params = [self.engine.sampling_params(n, s) for s in seeds]  # timed: the Sampler builds its own too
        outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        dt, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        token_ids = [[list(c.token_ids) for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]
        tokens = sum(len(t) for per_prompt in token_ids for t in per_prompt)
        return {"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt, "cpu_s": cpu, "token_ids": token_ids}


def cohort_token_ids(cohort, prompt_ids: list[str]) -> list[list[list[int]]]:
    """The cohort's token ids in the bare run's layout: per prompt (in `prompt_ids` order), its samples
    (payloads off the queue are fetched from the sampler's object store first)."""
    from ada_ray.actors.ray_payloads import RayPayloadStore
    from ada_ray.algo.payloads import fetch_into

    fetch_into(RayPayloadStore(), [s for g in cohort.groups for s in g.samples], RPC_TIMEOUT_S)
    by_prompt = {g.prompt_id: [list(s.completion_ids) for s in g.samples] for g in cohort.groups}
    return [by_prompt.get(p, []) for p in prompt_ids]


def mismatches(a: list[list[list[int]]], b: list[list[list[int]]]) -> int:
    """Prompts whose samples differ (token ids, sample order or count) between two runs."""
    return sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))


def _ready(ref, what: str):
    ready, _ = ray.wait([ref], timeout=RPC_TIMEOUT_S)
    if not ready:
        raise TimeoutError(f"bench sampler: {what} did not answer within {RPC_TIMEOUT_S:.0f}s")
    return ref


def _get(ref, what: str):
    return ray.get(_ready(ref, what))


def run_sampler(sampler, q, start_state: dict, prompt_ids: list[str]) -> dict:
    """One timed cohort through the Sampler, from the queue's starting state; the sampler is paused after."""
    _get(q.load_state_dict.remote(start_state), "queue reset")
    st0 = _get(sampler.stats.remote(), "sampler stats")
    t0 = time.perf_counter()
    _get(sampler.start_sampling.remote(), "start_sampling")
    done = _ready(q.wait_cohort.remote(0, RPC_TIMEOUT_S), "the cohort")
    # the clock stops when the queue has the whole cohort; reading it into this process (bare vLLM's
    # clock does not count returning its outputs either) comes after
    dt = time.perf_counter() - t0
    cohort = ray.get(done)
    _get(sampler.pause_sampling.remote(), "pause_sampling")
    # a lease the paused sampler still has open at the queue (a long poll of at most lease_wait_s) must
    # end empty before the next reset, or it would start the next run's work before its clock does
    time.sleep(PAUSE_SETTLE_S)
    st = _get(sampler.stats.remote(), "sampler stats")
    token_ids = cohort_token_ids(cohort, prompt_ids)
    tokens = sum(len(t) for per_prompt in token_ids for t in per_prompt)
    return {"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt, "token_ids": token_ids,
            **{k: st[k] - st0[k] for k in LOOP_STATS}}


def schedule(repeats: int, side_by_side: bool) -> list[tuple[int, str]]:
    """(pair, engine) in the order they run: pairs alternating which goes first, or (one engine at a
    time) every bare run, then every Sampler run."""
    if not side_by_side:
        return [(r, "bare") for r in range(repeats)] + [(r, "sampler") for r in range(repeats)]
    return [(r, w) for r in range(repeats) for w in (("bare", "sampler") if r % 2 == 0 else ("sampler", "bare"))]


def pair_up(plan: list[tuple[int, str]], runs: dict[tuple[int, str], dict]) -> list[dict]:
    """Each pair's two runs (without token ids), its order, its ratio and the prompts whose token ids
    differ from bare vLLM's first run."""
    reference = runs[(0, "bare")]["token_ids"]
    pairs = []
    for r in sorted({r for r, _ in plan}):
        res = {who: runs[(r, who)] for who in ("bare", "sampler")}
        pair = {who: {k: v for k, v in res[who].items() if k != "token_ids"} for who in res}
        pair["order"] = [who for rr, who in plan if rr == r]
        pair["ratio"] = res["sampler"]["tokens_per_s"] / res["bare"]["tokens_per_s"]
        pair["mismatched_prompts"] = {who: mismatches(res[who]["token_ids"], reference) for who in res}
        pairs.append(pair)
    return pairs


def run(out_dir: Path = Path("results"), smoke: bool = False, repeats: int = 5,
        overrides: list[str] | None = None) -> dict:
    from transformers import AutoTokenizer

    from ada_ray.driver import cluster as cl
    from ada_ray.actors.prompt_queue import PromptQueue
    from ada_ray.actors.ray_payloads import OWNERS_NAMESPACE, owner_actor_name
    from ada_ray.actors.sampler import Sampler
    from ada_ray.algo.scheduler import item_seed
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path

    n_prompts = 32 if smoke else 512
    repeats = 1 if smoke else max(1, repeats)
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
        start_state = _get(q.state_dict.remote(), "queue state")
        ids = start_state["cohorts"][0]["admitted"]
        by_id = {p.prompt_id: p for p in train_set.prompts}
        prompts = [list(by_id[i].token_ids) for i in ids]
        seeds = [item_seed(cfg.trainer.seed, i, 0, 0) for i in ids]
        answers = [by_id[i].answer for i in ids]

        def start(who: str):
            """The engine's actor, warmed up like the other (8 prompts, outside the timing)."""
            if who == "bare":
                a = BareVLLM.options(**opts).remote(model_path, d, env, use_gpu)
                _get(a.run.remote(prompts[:8], cfg.algo.n, seeds[:8]), "bare vLLM warm-up")
            else:
                owner = owner_actor_name("bench")
                a = Sampler.options(**opts, name=owner, namespace=OWNERS_NAMESPACE).remote(
                    "bench", d, model_path, q, use_gpu, 0, env, owner)
                _get(a.ready.remote(), "Sampler start")
                _get(a.evaluate.remote(prompts[:8], answers[:8], cfg.algo.n, cfg.sampler.temperature, 0),
                     "Sampler warm-up")
            return a

        def stop(who: str, a) -> None:
            if who == "sampler":
                _get(a.stop.remote(), "Sampler stop")
            ray.kill(a)

        # on CPU both engines live side by side and the pairs interleave; a GPU holds one engine at a time
        plan = schedule(repeats, side_by_side=not use_gpu)
        actors: dict = {}
        runs: dict = {}
        for r, who in plan:
            if who not in actors:
                for other in [k for k in actors if use_gpu]:
                    stop(other, actors.pop(other))
                actors[who] = start(who)
            if who == "bare":
                runs[(r, who)] = _get(actors[who].run.remote(prompts, cfg.algo.n, seeds), "bare vLLM run")
            else:
                runs[(r, who)] = run_sampler(actors[who], q, start_state, ids)
        for who, a in actors.items():
            stop(who, a)
        ray.get(q.stop.remote())
        ray.kill(q)
    finally:
        c.shutdown()
    pairs = pair_up(plan, runs)
    ratios = [p["ratio"] for p in pairs]
    median = statistics.median(ratios)
    mid = min(pairs, key=lambda p: abs(p["ratio"] - median))  # the pair closest to the median, for the table
    result = {"prompts": n_prompts, "n": cfg.algo.n, "repeats": repeats, "pairs": pairs,
              "ratios": ratios, "ratio_range": [min(ratios), max(ratios)],
              "same_tokens": all(v == 0 for p in pairs for v in p["mismatched_prompts"].values()),
              "bare_vllm": mid["bare"], "sampler": mid["sampler"], "sampler_vs_bare": median}
    write_result(out_dir, "sampler", result)
    bar_chart(out_dir / "sampler.png", f"generated tokens/s, {n_prompts} prompts x {cfg.algo.n} (median pair)",
              "tokens/s", {"bare vllm.LLM.generate": {"tokens/s": mid["bare"]["tokens_per_s"]},
                           "ada_ray Sampler": {"tokens/s": mid["sampler"]["tokens_per_s"]}})
    return result


def format_table(result: dict) -> str:
    rows = ["| pair | order | bare s | bare tok/s | bare CPU s | Sampler s | Sampler tok/s | Sampler loop CPU s | "
            "engine steps s | ratio |", "| --- " * 10 + "|"]
    for i, p in enumerate(result["pairs"]):
        b, s = p["bare"], p["sampler"]
        rows.append(f"| {i} | {' then '.join(p['order'])} | {b['seconds']:.2f} | {b['tokens_per_s']:.0f} | "
                    f"{b['cpu_s']:.2f} | {s['seconds']:.2f} | {s['tokens_per_s']:.0f} | {s['cpu_s']:.2f} | "
                    f"{s['busy_s']:.2f} | {p['ratio']:.3f} |")
    lo, hi = result["ratio_range"]
    return ("\n".join(rows) + f"\n\n{result['sampler']['tokens']} tokens a run. Sampler / bare: median "
            f"{result['sampler_vs_bare']:.3f} over {result['repeats']} pairs (range {lo:.3f}-{hi:.3f}); "
            f"same token ids as bare vLLM in every run: {result['same_tokens']}")
