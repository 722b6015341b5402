"""`ada-ray bench gpu`: the GPU paths that need neither Ray nor vLLM, measured on one machine.

A GPU machine without Ray or the CUDA vLLM build (an image that cannot install them, say) can still
run the parts of ada_ray that own the GPU work, through the same code the actors call:
  learner   LearnerCore on a DeepSpeed engine in bf16 (ZeRO stage `zero_stage`) on the GPU: the
            shipped embedded policy and a Qwen2-0.5B-shaped model (random weights: no downloads);
            reports step seconds, tokens/s, peak GPU memory, that every loss is finite and the
            weights moved, and the bf16-vs-fp32 mismatch (the k3 KL of the learner's bf16 log-probs
            against fp32 log-probs of the same tokens: what a fp32 sampler and a bf16 learner see);
  bus       the WeightBus moving the 0.5B model's bf16 state dict from a GPU sender to a GPU
            receiver in another process: gloo through host memory (the colocated mode) and NCCL
            (two ranks on one GPU: NCCL refuses that, and the row says so).
On a CPU machine (`device=cpu`, what the test runs) the same code runs small in fp32.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import statistics
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch

from ada_ray.bench.common import write_result

QWEN2_0P5B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True)
SMOKE_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=True)


# seen on an H200 (NCCL 2.28.9, 2026-12-04): two ranks on one GPU -> "invalid usage", with NCCL_DEBUG=WARN
# "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device"
ONE_GPU_NCCL = ("needs 2 GPUs: NCCL refuses two ranks on one device (\"Duplicate GPU detected\"), which is why a "
                "colocated sampler and learner use gloo")


def environment() -> dict:
    """What this machine has: the GPU, torch/CUDA/NCCL, and which of the project's packages import."""
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None, "bf16": False, "nccl": None}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        env["bf16"] = bool(torch.cuda.is_bf16_supported())
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    for name in ("deepspeed", "transformers", "vllm", "ray", "omegaconf", "mlflow"):
        try:
            env[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - any import failure means "not usable here"
            env[name] = f"missing ({type(exc).__name__})"
    return env


def qwen2(shape: dict, device: torch.device, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(**shape, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with torch.device(device):
        return Qwen2ForCausalLM(cfg).float()


def embedded_policy(device: torch.device):
    from transformers import AutoModelForCausalLM

    from ada_ray.data.shipped_policy import SHIPPED_DIR

    return AutoModelForCausalLM.from_pretrained(SHIPPED_DIR, dtype=torch.float32).to(device)


@torch.no_grad()
def sample_rows(model, n: int, prompt_len: int, completion_len: int, device: torch.device, seed: int = 0) -> list:
    """n rows: random prompts, completions sampled from `model` (fp32, temperature 1), with the fp32
    per-token log-probs as behaviour log-probs and standard-normal advantages."""
    from ada_ray.learner.core import Row, sequence_logprobs

    g = torch.Generator(device="cpu").manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (n, prompt_len), generator=g).to(device)
    model.eval()
    for _ in range(completion_len):
        logits = model(input_ids=ids, logits_to_keep=1).logits[:, -1].float()
        nxt = torch.multinomial(torch.softmax(logits, -1), 1)
        ids = torch.cat([ids, nxt], dim=1)
    ids = ids.cpu().tolist()
    adv = torch.randn(n, generator=g).tolist()
    rows = [Row(seq[:prompt_len], seq[prompt_len:], [], a, 0) for seq, a in zip(ids, adv)]
    for lo in range(0, n, 16):  # in parts: the logits of a large vocabulary are big
        lp, _, _, _ = sequence_logprobs(model, rows[lo:lo + 16], 0, 1.0, device, False)
        for i, r in enumerate(rows[lo:lo + 16]):
            r.behaviour_logprobs = lp[i, prompt_len - 1:prompt_len - 1 + completion_len].float().cpu().tolist()
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def learner_check(model, device: torch.device, bf16: bool, zero_stage: int, steps: int, n_rows: int,
                  prompt_len: int, completion_len: int, micro: int) -> dict:
    """`steps` LearnerCore training steps on one batch of sampled rows; the first is a warm-up."""
    from ada_ray.algo.loss import LossConfig
    from ada_ray.learner.core import LearnerCore, make_deepspeed_engine

    t0 = time.perf_counter()
    rows = sample_rows(model, n_rows, prompt_len, completion_len, device)
    sample_s = time.perf_counter() - t0
    lcfg = SimpleNamespace(lr=1e-5, betas=[0.9, 0.99], weight_decay=0.0, warmup_steps=0, grad_clip=1.0,
                           zero_stage=zero_stage)
    engine = make_deepspeed_engine(model, lcfg, steps, bf16)
    core = LearnerCore(engine, LossConfig(), 0, 1.0, micro, device)
    before = next(p for p in engine.module.parameters() if p.dim() == 2).detach().float().cpu().clone()
    tokens = sum(len(r.prompt) + len(r.completion) for r in rows)
    ctoks = float(sum(len(r.completion) for r in rows))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, metrics = [], []
    for _ in range(steps):
        _sync(device)
        t = time.perf_counter()
        metrics.append(core.train([(rows, ctoks, float(len(rows)))], 1))
        _sync(device)
        times.append(time.perf_counter() - t)
    after = next(p for p in engine.module.parameters() if p.dim() == 2).detach().float().cpu()
    timed = times[1:] or times
    step_s = sum(timed) / len(timed)
    out = {"params_m": round(sum(p.numel() for p in engine.module.parameters()) / 1e6, 1),
           "dtype": "bfloat16" if bf16 else "float32", "zero_stage": zero_stage, "rows": n_rows,
           "tokens_per_step": tokens, "steps": steps, "sample_s": round(sample_s, 3), "step_s": step_s,
           "step_s_all": times, "tokens_per_s": tokens / step_s,
           "losses": [m["loss"] for m in metrics],
           "all_finite": all(m["nonfinite_minibatches"] == 0 and m["loss"] == m["loss"] for m in metrics),
           "weights_moved": bool((after - before).abs().max() > 0),
           # first step: the weights are those that sampled the rows, so this is pure dtype mismatch
           "mismatch_kl_k3": metrics[0].get("kl_behaviour", float("nan")),
           "grad_norm_first": metrics[0]["grad_norm"]}
    if device.type == "cuda":
        out["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del engine, core
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


# -- the weight bus between two processes ----------------------------------------------------------------

def _bus_state(shape: dict, device: str) -> dict:
    model = qwen2(shape, torch.device(device), seed=1).to(torch.bfloat16)
    # what the Learner actor sends: named parameters (a tied embedding travels once)
    return {k: v.detach() for k, v in model.named_parameters()}


def _checksum(named) -> float:
    return float(sum(t.double().sum().item() for _, t in named))


def _bus_sender(backend, shape, device, port_q, meta_q, res_q, repeats, timeout_s):
    os.environ.setdefault("NCCL_DEBUG", "WARN")  # NCCL names the cause of a refusal in the log
    try:
        from ada_ray.sync.weight_bus import WeightBusSender

        state = _bus_state(shape, device)
        sender = WeightBusSender(2, backend, "127.0.0.1", bucket_mb=256.0, timeout_s=timeout_s)
        port_q.put(sender.port)
        sender.connect()
        meta = sender.meta(state.items(), 1)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up (connections, NCCL communicator, buffers)
            meta_q.put(meta)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            stats = sender.send(state.items(), meta)
            times.append(time.perf_counter() - t)
        meta_q.put(None)
        res_q.put(("sender", {"bytes": stats["bytes"], "buckets": stats["buckets"], "packing": meta["packing"],
                              "times": times, "checksum": _checksum(state.items())}))
        sender.close()
    except Exception as exc:  # noqa: BLE001 - reported as the row's result
        res_q.put(("sender", {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}",
                              "trace": traceback.format_exc()[-2000:]}))
        meta_q.put(None)


def _bus_receiver(backend, device, port_q, meta_q, res_q, timeout_s):
    try:
        from ada_ray.sync.weight_bus import WeightBusReceiver

        port = port_q.get(timeout=timeout_s)
        recv = WeightBusReceiver("127.0.0.1", port, 1, 2, backend, timeout_s, device)
        recv.connect()
        checksum, times = None, []
        while (meta := meta_q.get(timeout=timeout_s)) is not None:
            t = time.perf_counter()
            got = list(recv.receive(meta))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            checksum = _checksum(got)
        res_q.put(("receiver", {"times": times, "checksum": checksum, "device": str(got[0][1].device)}))
        recv.close()
    except Exception as exc:  # noqa: BLE001
        res_q.put(("receiver", {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}))


def bus_check(backend: str, shape: dict, sender_device: str, receiver_device: str, repeats: int = 3,
              timeout_s: float = 120.0) -> dict:
    """One bf16 state dict of `shape` from a sender process to a receiver process over the WeightBus."""
    ctx = mp.get_context("spawn")
    port_q, meta_q, res_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_bus_sender, args=(backend, shape, sender_device, port_q, meta_q, res_q, repeats,
                                                   timeout_s), daemon=True),
             ctx.Process(target=_bus_receiver, args=(backend, receiver_device, port_q, meta_q, res_q, timeout_s),
                         daemon=True)]
    for p in procs:
        p.start()
    res: dict = {}
    deadline = time.monotonic() + 2 * timeout_s + 60
    while len(res) < 2 and time.monotonic() < deadline:
        try:
            who, r = res_q.get(timeout=5)
            res[who] = r
            if "error" in r:  # the other side fails or times out on its own: give it a little while
                deadline = min(deadline, time.monotonic() + 20)
        except Exception:  # noqa: BLE001 - queue.Empty: look whether both still live
            if not any(p.is_alive() for p in procs) and res_q.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    s, r = res.get("sender", {}), res.get("receiver", {})
    out = {"backend": backend, "sender_device": sender_device, "receiver_device": receiver_device}
    err = s.get("error") or r.get("error")
    if err or not s or not r:
        out["error"] = err or f"no result from the {'sender' if not s else 'receiver'} within {2 * timeout_s + 60:.0f} s"
        return out
    mb = s["bytes"] / 1e6
    send_s, recv_s = (statistics.median(t[1:] or t) for t in (s["times"], r["times"]))  # the first: warm-up
    out.update({"mb": round(mb, 1), "buckets": s["buckets"], "packing": s["packing"], "send_s": send_s,
                "receive_s": recv_s, "mb_per_s": mb / max(send_s, recv_s),
                "checksum_match": abs(s["checksum"] - r["checksum"]) <= 1e-6 * max(1.0, abs(s["checksum"])),
                "received_on": r["device"]})
    return out


# -- the bench -------------------------------------------------------------------------------------------

def _guard(name: str, fn) -> dict:
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - one failing part must not hide the others
        out = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc) else ''}",
               "trace": traceback.format_exc()[-3000:]}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"[bench gpu] {name}: {json.dumps({k: v for k, v in out.items() if k != 'trace'})[:600]}", flush=True)
    return out


def run(out_dir: Path = Path("results"), steps: int = 4, smoke: bool = False) -> dict:
    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    big = QWEN2_0P5B if cuda else SMOKE_SHAPE
    dev = "cuda:0" if cuda else "cpu"
    result: dict = {"device": str(device), "environment": environment(), "parts": {}}
    parts = result["parts"]
    from ada_ray.learner.core import init_single_rank_group

    init_single_rank_group(device)
    _run_parts(parts, device, cuda, big, dev, steps)
    write_result(out_dir, "gpu", result)
    (out_dir / "gpu_table.md").write_text(format_table(result) + "\n")
    return result


def _run_parts(parts: dict, device: torch.device, cuda: bool, big: dict, dev: str, steps: int) -> None:
    parts["learner_embedded"] = _guard("learner_embedded", lambda: learner_check(
        embedded_policy(device), device, cuda, 2 if cuda else 0, steps, 256 if cuda else 16, 16, 8, 256))
    if cuda:
        parts["learner_qwen2_0p5b"] = _guard("learner_qwen2_0p5b", lambda: learner_check(
            qwen2(big, device), device, True, 2, steps, 64, 64, 192, 16))
    parts["bus_gloo"] = _guard("bus_gloo", lambda: bus_check("gloo", big, dev, dev, 3 if cuda else 1))
    if cuda and torch.cuda.device_count() >= 2:
        parts["bus_nccl"] = _guard("bus_nccl", lambda: bus_check("nccl", big, "cuda:0", "cuda:1", 3, timeout_s=90.0))
    elif cuda:
        parts["bus_nccl"] = {"backend": "nccl", "skipped": ONE_GPU_NCCL}


def _row(name: str, p: dict, ok: bool, detail: str) -> str:
    if "skipped" in p:
        return f"| {name} | skipped | {p['skipped']} | |"
    if "error" in p:
        return f"| {name} | FAIL | {p['error']} | {p.get('seconds', '')} |"
    return f"| {name} | {'ok' if ok else 'FAIL'} | {detail} | {p.get('seconds', '')} |"


def format_table(result: dict) -> str:
    env = result["environment"]
    lines = ["| check | result | detail | seconds |", "| --- | --- | --- | --- |",
             f"| environment ({result['device']}) | ok | {env.get('gpu') or 'no GPU'}; torch {env['torch']} "
             f"(CUDA {env['cuda']}, NCCL {env['nccl']}); bf16 {env['bf16']}; deepspeed {env['deepspeed']}; "
             f"transformers {env['transformers']}; vllm {env['vllm']}; ray {env['ray']} | |"]
    for key, label in (("learner_embedded", "learner: embedded policy"), ("learner_qwen2_0p5b", "learner: Qwen2-0.5B shape")):
        p = result["parts"].get(key)
        if p is None:
            continue
        ok = p.get("all_finite", False) and p.get("weights_moved", False)
        detail = "" if "error" in p else (
            f"{p['params_m']}M params, {p['dtype']} ZeRO-{p['zero_stage']}, {p['rows']} rows x "
            f"{p['tokens_per_step'] // max(p['rows'], 1)} tokens: {p['step_s']:.3f} s/step, "
            f"{p['tokens_per_s']:.0f} tokens/s" + (f", peak {p['peak_gib']} GiB" if "peak_gib" in p else "")
            + f"; bf16-vs-fp32 KL(k3) {p['mismatch_kl_k3']:.2e}; finite {p['all_finite']}, moved {p['weights_moved']}")
        lines.append(_row(label, p, ok, detail))
    for key in ("bus_gloo", "bus_nccl"):
        p = result["parts"].get(key)
        if p is None:
            continue
        name = f"weight bus {p.get('backend', key[4:])}" + (
            f" ({p['sender_device']} -> {p['receiver_device']})" if "sender_device" in p else "")
        detail = "" if "error" in p or "skipped" in p else (
            f"{p['mb']} MB bf16 in {p['buckets']} buckets ({p['packing']}): send {p['send_s']:.3f} s, "
            f"receive {p['receive_s']:.3f} s, {p['mb_per_s']:.0f} MB/s; checksum match {p['checksum_match']}; "
            f"received on {p['received_on']}")
        lines.append(_row(name, p, p.get("checksum_match", False), detail))
    return "\n".join(lines)


if __name__ == "__main__":  # python -m ada_ray.bench.gpu [out_dir]
    import sys

    res = run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("results"))
    print(format_table(res))
