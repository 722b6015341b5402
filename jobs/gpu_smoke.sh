#!/usr/bin/env bash
# GPU smoke check for a single-GPU machine (at most ~10 minutes once installed): what can be checked
# on one GPU, printed as a short table.
#
#   1. GPU parts without Ray or vLLM (`ada-ray bench gpu`): the DeepSpeed learner in bf16 ZeRO-2 on
#      the GPU (the shipped embedded policy and a Qwen2-0.5B-shaped model), the bf16-vs-fp32
#      log-prob mismatch, and the weight bus moving a 0.5B bf16 state dict GPU -> GPU between two
#      processes (gloo through host memory, the colocated mode; NCCL with two ranks on one GPU)
#   2. colocated training: `ada-ray train` with sampler and learner sharing the GPU (0.5 + 0.5),
#      learner in bf16 (DeepSpeed, ZeRO-2), vLLM on the GPU, the weight bus in colocated mode
#      (gloo through host memory: one GPU cannot hold two NCCL ranks); 6 async steps on the
#      embedded task; reports step time, weight-sync seconds and MB/s, tokens/s, and the KL
#      between learner and sampler (bf16 mismatch)
#   3. sampler tokens/s against bare vllm.LLM.generate on the GPU (`ada-ray bench sampler`)
# Checks 2 and 3 need Ray and the CUDA vLLM build; where those do not import (an image that cannot
# install them) their rows say "skipped" and name what is missing, and only FAIL rows fail the script.
#
# Usage (from the repository root):
#   jobs/gpu_smoke.sh            # uses .venv-gpu (made with --install) or the current python
#   jobs/gpu_smoke.sh --install  # first: python3 -m venv .venv-gpu && pip install -e ".[gpu,dev]"
# Results: results/gpu_smoke/ (gpu.json, gpu_table.md, the run directory, bench JSON, and table.md).
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--install" ]]; then
    python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -e ".[gpu,dev]" || exit 1
fi
PY=python3
[[ -x .venv-gpu/bin/python ]] && PY=.venv-gpu/bin/python
OUT=${GPU_SMOKE_OUT:-results/gpu_smoke}
rm -rf "$OUT" && mkdir -p "$OUT"
export RAY_AUTH_MODE=disabled RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 HF_HUB_OFFLINE=1
export PYTHONWARNINGS=ignore::FutureWarning
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); }

t0=$SECONDS
if env_out=$(timeout 120 "$PY" - <<'EOF' 2>&1
import torch, deepspeed
assert torch.cuda.is_available(), "torch sees no GPU"
try:
    import vllm
    vllm_version = vllm.__version__
except Exception as exc:
    vllm_version = f"missing ({type(exc).__name__})"
print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}; vllm {vllm_version}; "
      f"deepspeed {deepspeed.__version__}; bf16 {torch.cuda.is_bf16_supported()}")
EOF
); then row "environment" "ok" "$(echo "$env_out" | tail -1)" "$((SECONDS - t0))"
else row "environment" "FAIL" "$(echo "$env_out" | tail -1)" "$((SECONDS - t0))"; fi

t0=$SECONDS
if timeout 480 "$PY" -m ada_ray.bench.gpu "$OUT" > "$OUT/bench_gpu.log" 2>&1; then
    while IFS= read -r line; do ROWS+=("$line"); done < <(tail -n +3 "$OUT/gpu_table.md")
else
    row "GPU parts (bench gpu)" "FAIL" "$(tail -1 "$OUT/bench_gpu.log")" "$((SECONDS - t0))"
fi

missing=$(timeout 120 "$PY" -c "
import importlib
bad = []
for m in ('ray', 'vllm', 'omegaconf', 'mlflow'):
    try:
        importlib.import_module(m)
    except Exception as e:
        bad.append(f'{m} ({type(e).__name__})')
print(', '.join(bad))" 2>/dev/null)
if [[ -n "$missing" ]]; then
    row "colocated train (bf16 learner, vLLM GPU, gloo bus)" "skipped" "not importable here: $missing" 0
    row "sampler tokens/s (GPU)" "skipped" "not importable here: $missing" 0
else

t0=$SECONDS
timeout 300 "$PY" -m ada_ray train grpo trainer.total_steps=6 trainer.eval_every=0 trainer.final_eval=false \
    weight_sync.colocated=true sampler.num_gpus=0.5 learner.num_gpus=0.5 sampler.gpu_memory_utilization=0.35 \
    learner.dtype=bfloat16 learner.zero_stage=2 trainer.output_dir="$OUT" trainer.run_name=colocated \
    trainer.progress=plain > "$OUT/train.log" 2>&1
code=$?
if [[ $code -eq 0 ]]; then
    detail=$("$PY" - "$OUT/colocated/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
rows = [r for r in rows if "time/step" in r][1:] or rows
m = lambda k: statistics.mean(r[k] for r in rows if k in r) if any(k in r for r in rows) else float("nan")
print(f"step {m('time/step'):.2f} s; sync {m('sync/seconds'):.3f} s at {m('sync/mb_per_s'):.0f} MB/s; "
      f"{m('perf/tokens_per_s'):.0f} tokens/s; KL(learner||sampler) {m('learner/kl_behaviour'):.2e}")
EOF
)
    row "colocated train (bf16 learner, vLLM GPU, gloo bus)" "ok" "$detail" "$((SECONDS - t0))"
else
    row "colocated train (bf16 learner, vLLM GPU, gloo bus)" "FAIL (exit $code)" "$(tail -1 "$OUT/train.log")" "$((SECONDS - t0))"
fi

t0=$SECONDS
if timeout 240 "$PY" -m ada_ray bench sampler out="$OUT" sampler.num_gpus=1 sampler.gpu_memory_utilization=0.5 \
        > "$OUT/bench_sampler.log" 2>&1; then
    detail=$("$PY" -c "import json; d=json.load(open('$OUT/sampler.json')); print(f\"sampler {d['sampler']['tokens_per_s']:.0f} tokens/s, bare vLLM {d['bare_vllm']['tokens_per_s']:.0f}, ratio {d['sampler_vs_bare']:.2f}\")")
    row "sampler tokens/s (GPU)" "ok" "$detail" "$((SECONDS - t0))"
else
    row "sampler tokens/s (GPU)" "FAIL" "$(tail -1 "$OUT/bench_sampler.log")" "$((SECONDS - t0))"
fi
fi

{
    echo "| check | result | detail | seconds |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.md"
! grep -q "FAIL" "$OUT/table.md"
