"""The one config schema of ada_ray: a dataclass per section (data, model, algo, sampler, learner,
weight sync, trainer, tracking, prepare), every knob with its type, default and a comment that
docs/CONFIG.md is generated from; the enumerated knobs' choices; ConfigError.

Loading (YAML presets, overrides) is ada_ray/config.py; validation ada_ray/config_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ada_ray.errors import InputError

ALGORITHMS = ("grpo", "dapo", "ada_seq_pos", "ada_seq_balance", "ada_est", "ada_budget")
ADA_SEQ = ("ada_seq_pos", "ada_seq_balance", "ada_budget")


class ConfigError(InputError, ValueError):
    """A configuration mistake; the message names the file or key and what was expected."""


# ----------------------------------------------------------------------------------------------
# schema
# ----------------------------------------------------------------------------------------------


@dataclass
class DataConfig:
    # embedded: the built-in chain-sum task; jsonl / parquet / hf_disk: user datasets on disk.
    source: str = "embedded"
    train_path: Optional[str] = None  # training records (jsonl / parquet file, or a save_to_disk folder)
    eval_path: Optional[str] = None  # evaluation records, same format
    question_field: str = "question"  # record field holding the question
    answer_field: str = "answer"  # record field holding the reference answer
    id_field: Optional[str] = None  # record field with a stable prompt id (default: hash of the question)
    difficulty_field: Optional[str] = None  # record field with a difficulty label (metrics per label)
    # record field with an offline pass rate in [0, 1] (`ada-ray prepare-data` writes "pass_rate"):
    # seeds the queue's difficulty memory, worth algo.prior_weight samples
    pass_rate_field: Optional[str] = None
    # raw: the question as is; math_boxed: the paper's template (system prompt + suffix) rendered
    # with the tokenizer's chat template when it has one.
    prompt_template: str = "raw"
    system_prompt: str = "Please reason step by step, and put your final answer within \\boxed{}."  # math_boxed
    max_prompt_tokens: int = 32  # longer prompts are dropped (and counted)
    # "exact" (string match), "math" (math-verify on the last \boxed{}), or
    # "module.path:function" naming a function (completion, answer) -> float.
    reward: str = "exact"
    reward_timeout_s: float = 5.0  # per verifier call; a call past it scores 0 and is counted
    # embedded task: chain sums written compactly ("57+38-9="); levels are TxD (terms x digits).
    levels: list[str] = field(default_factory=lambda: ["2x1", "3x1", "2x2", "3x2", "2x3", "4x2"])
    train_per_level: int = 500  # embedded: train prompts per level (fewer for small levels)
    eval_per_level: int = 50  # embedded: eval prompts per level from its held-out pool (at most 200; 2x1: 50)
    seed: int = 0  # embedded: generator seed
    # embedded: answers most-significant digit first ("86") or least-significant first ("68"; sign first)
    answer_order: str = "msb_first"


@dataclass
class EmbeddedModelConfig:
    """Shape of the tiny Qwen2 policy built locally (no hub)."""

    hidden_size: int = 128  # Qwen2 hidden size
    intermediate_size: int = 512  # MLP width
    num_layers: int = 4  # decoder layers
    num_heads: int = 4  # attention heads
    num_kv_heads: int = 2  # key/value heads (GQA)
    max_positions: int = 64  # context length


@dataclass
class WarmStartConfig:
    """Supervised warm-start of the embedded policy on the embedded task."""

    steps: int = 1500  # SFT steps of the schedule (warm-up, then cosine decay over these steps)
    # stop the SFT after this many steps of that schedule (null: run it all): a half-trained policy
    # whose pass rates are low but nonzero on many prompts, with room for RL to improve (the default
    # recipe's policy ships with the package: ada_ray/data/embedded_policy)
    stop_at_step: Optional[int] = 900
    batch_size: int = 64  # examples per SFT step
    lr: float = 3e-3  # peak learning rate (AdamW)
    warmup_steps: int = 50  # linear warm-up
    min_lr_ratio: float = 0.1  # cosine decay down to lr x this
    weight_decay: float = 0.01  # AdamW weight decay
    seed: int = 0  # model init and data stream seed
    threads: int = 2  # torch threads
    # levels the base policy is taught (independent of data.levels, so RL on a subset reuses it)
    levels: list[str] = field(default_factory=lambda: ["2x1", "3x1", "2x2", "3x2", "2x3", "4x2"])


@dataclass
class ModelConfig:
    # "embedded": build + warm-start the tiny policy into cache_dir (once); else a local folder
    # with a transformers checkpoint (or a hub name on machines that reach the hub).
    path: str = "embedded"
    cache_dir: Optional[str] = None  # default: $ADA_RAY_CACHE or ~/.cache/ada_ray
    dtype: str = "auto"  # sampler weights dtype (auto: the checkpoint's on GPU, float32 on CPU)
    embedded: EmbeddedModelConfig = field(default_factory=EmbeddedModelConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)


@dataclass
class AlgoConfig:
    name: str = "ada_seq_balance"  # the algorithm
    n: int = 4  # update group size per prompt (grpo/dapo: samples per prompt)
    # ada_seq: samples drawn per round (M). With M < n the exit rule (k_pos/k_neg) also waits for a
    # pool of >= n samples so every prompt keeps exactly n; the official Seq-pos instead stops at the
    # first positive and keeps fewer than n rows (a deliberate difference; same result when M >= n)
    samples_per_round: int = 8
    max_rounds: int = 4  # ada_seq: round cap (R)
    k_pos: Optional[int] = None  # default: 1 (pos) or floor(n/2) (balance)
    k_neg: Optional[int] = None  # default: n - floor(n/2) (balance)
    positive_threshold: float = 0.7  # a sample is positive when its reward exceeds this
    norm_adv_by_std: Optional[bool] = None  # default: true for grpo/dapo, false otherwise
    inverse_p_weight: bool = False  # ada_seq: paper v3 1/p-hat factor on the advantage
    est_alpha: float = 1.0  # pass-rate memory: Beta prior alpha
    est_beta: float = 16.0  # pass-rate memory: Beta prior beta
    est_lambda: float = 0.9  # pass-rate memory: EMA decay of the counts
    prior_weight: float = 8.0  # pass-rate memory: samples an offline pass rate (data.pass_rate_field) is worth
    est_mean_samples: float = 8.0  # ada_est: average samples per prompt (budget = this x batch)
    # ada_est budget rule: inv_sqrt (paper) n ~ 1/sqrt(p-hat); inv (public code) one sample each, then
    # the rest ~ 1/p-hat. Both clipped to [est_n_min, est_n_max], largest-remainder rounding.
    est_weight: str = "inv_sqrt"
    est_n_min: int = 2  # ada_est: fewest samples per prompt
    est_n_max: int = 32  # ada_est: most samples per prompt
    est_residual_weight: bool = True  # ada_est: advantage x 1/sqrt(mean reward)
    dapo_max_draws_factor: float = 3.0  # dapo: at most this x batch prompts drawn per step
    # ada_budget (algo/budget.py): rounds sized from the prompt's pass-rate posterior Beta(N_pos + a0,
    # N - N_pos + b0) with the memory's decayed counts; a prompt with no history gets samples_per_round
    budget_prior: list[float] = field(default_factory=lambda: [1.0, 1.0])  # ada_budget: the posterior's prior [a0, b0]
    settle_target: float = 0.5  # ada_budget: a round is the fewest samples that fire the exit rule with this probability
    budget_max_samples: int = 12  # ada_budget: most samples a prompt gets in one step (all its rounds)
    park_below: float = 0.25  # ada_budget: P(rule fires within budget_max_samples) below this parks a prompt
    explore_floor: float = 0.1  # ada_budget: probability a parked prompt is drawn anyway when its turn comes
    park_need: str = "exit"  # ada_budget: what must be within reach not to park: the exit rule, or one pair (1 pos + 1 neg)
    probe_samples: int = 0  # ada_budget: 0 parks a mostly-failed prompt out of reach; k (>= n) draws it with one round of k
    clip_low: float = 0.2  # PPO ratio clip below 1
    clip_high: float = 0.28  # PPO ratio clip above 1 (asymmetric, "clip-higher")
    dual_clip_c: Optional[float] = 10.0  # dual clip for negative advantages (null: off)
    entropy_coef: float = 0.0  # entropy bonus
    kl_coef: float = 0.0  # KL(pi || reference) penalty (k3 estimator; > 0 keeps a frozen reference)
    loss_agg: str = "token_mean"  # how token losses are averaged
    tis_cap: Optional[float] = 2.0  # off-policy correction: weight prox/behaviour truncated here (null: off)


@dataclass
class SamplerConfig:
    num_samplers: int = 1  # S: sampler actors (one vLLM engine each)
    engine: str = "vllm"  # generation backend
    temperature: float = 1.0  # sampling temperature (the learner scales logits by it too)
    top_p: float = 1.0  # nucleus sampling
    top_k: int = -1  # top-k sampling (-1: off)
    max_new_tokens: int = 8  # response length cap
    max_model_len: int = 64  # engine context length (prompt + response)
    max_num_seqs: int = 256  # sequences in flight per engine (continuous batching capacity)
    num_cpus: float = 1.0  # CPUs per sampler actor (Ray resource; CPU engine threads)
    num_gpus: float = 0.0  # GPUs per sampler actor (x tensor_parallel_size)
    gpu_memory_utilization: float = 0.5  # vLLM GPU memory share
    tensor_parallel_size: int = 1  # vLLM tensor parallel size
    kv_cache_gib: float = 1.0  # CPU engine only: KV cache size
    enforce_eager: bool = True  # no CUDA graphs / torch.compile (fast start)
    seed: int = 0  # engine seed (work items carry their own seeds)
    lease_timeout_s: float = 600.0  # a leased work item not reported by then goes out again
    # a sampler (a replacement too) not up by then is given up: at the start the run fails, a replacement
    # leaves the run going with fewer samplers (a warning in the log)
    start_timeout_s: float = 600.0
    reward_workers: int = 0  # 0: score in the sampler's thread; >0: a process pool (bounds hangs)
    # where the token ids, log-probs and texts of reported samples travel: object_store (one Ray object a
    # report batch, owned by the sampler; the queue sees only metadata, the learner fetches) or inline
    # (inside the report, through the queue actor and the driver)
    payload_transport: str = "object_store"
    # samplers reach the queue through one QueueRelay a node (and queue shard), which sends their leases
    # and reports to the queue combined, many a call (each Ray call costs the queue ~0.5 ms of CPU):
    # per_node, direct (each sampler calls the queue), or auto (per_node from 64 samplers)
    queue_relay: str = "auto"
    # a sampler's lease ask goes out with its next report call when one is coming (one queue call where a
    # report and a lease made two); false: every ask is a lease call of its own. Direct calls only: through
    # a relay (queue_relay) asks never ride (the relay combines them already)
    leases_ride_reports: bool = True
    # at most one report call a sampler this often (seconds): finished work waits and goes in one call.
    # An engine finishes a few sequences a step, so with long generations every pass held about one item:
    # a queue call an item. 0: a call every pass; null (auto): 0.25 in async mode, 0 in sync mode (where
    # every round of a step would wait out its held reports). BENCHMARKS "Samplers shaped as the real one"
    report_interval_s: Optional[float] = None
    # custom Ray resources each sampler asks for besides CPUs/GPUs, e.g. {node_a: 1}: only nodes started
    # with `ray start --resources '{"node_a": N}'` host samplers (pin samplers and learners to node pools)
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class LearnerConfig:
    num_learners: int = 1  # L: data-parallel DeepSpeed ranks
    lr: float = 1e-4  # AdamW learning rate
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # AdamW betas
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_steps: int = 0  # linear LR warm-up steps
    grad_clip: float = 1.0  # global grad-norm clip (0: off)
    zero_stage: int = 0  # DeepSpeed ZeRO stage 0-3
    micro_batch_size: int = 256  # sequences per forward/backward
    mini_batches: int = 1  # optimizer steps per training step (PPO mini-batches)
    dtype: str = "auto"  # training dtype (auto: bf16 on GPU, fp32 on CPU)
    num_cpus: float = 1.0  # CPUs per learner actor (Ray resource; torch threads on CPU)
    num_gpus: float = 0.0  # GPUs per learner actor
    gradient_checkpointing: bool = False  # recompute activations in backward
    max_nonfinite_steps: int = 5  # stop after this many steps in a row skipped for NaN/inf losses
    # custom Ray resources each learner asks for besides CPUs/GPUs, e.g. {node_b: 1} (as sampler.resources)
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class WeightSyncConfig:
    backend: str = "auto"  # auto: nccl when samplers and learners have GPUs, else gloo
    bucket_mb: float = 64.0  # tensors are broadcast in buckets of about this size
    packing: str = "auto"  # per bucket: a broadcast per tensor, one flat buffer, or hybrid (auto: hybrid on gloo, flat on NCCL)
    host: str = "auto"  # address the learner's store binds; auto: 127.0.0.1 or the node IP
    port: int = 0  # the store's port on that host (0: a free one)
    timeout_s: float = 300.0  # bus set-up and broadcast timeout
    # sampler i and learner i share one placement bundle (one GPU: e.g. sampler.num_gpus=0.5,
    # learner.num_gpus=0.5); the bus then runs on gloo through host memory, so no device holds two
    # NCCL ranks. Needs sampler.num_samplers == learner.num_learners.
    colocated: bool = False


@dataclass
class TrainerConfig:
    mode: str = "async"  # async: samplers run ahead (bounded staleness); sync: round barrier, on-policy
    total_steps: int = 200  # training steps
    total_epochs: Optional[int] = None  # stop when the data has been used this many times (null: no limit)
    total_samples: Optional[int] = None  # stop once trained cohorts have generated this many samples (null: no limit)
    batch_prompts: int = 32  # B: prompts (groups) per training step
    max_staleness: int = 2  # async: a sample is trained at most this many versions after its policy
    # PromptQueue shards (one actor each, prompts split by a hash of their id, each cohort B // K prompts
    # per shard, a coordinator merges them); > 1 when one queue actor cannot keep up with the samplers
    # (~8k-13k work items/s a core). Per shard: prompt order, epochs (the smallest shard's data ends the
    # run) and sync mode's round barrier; a checkpoint resumes only with the same value
    queue_shards: int = 1
    prompt_order: str = "sequential"  # new prompts per epoch: shuffled, hardest first, or weighted by 1/sqrt(p-hat)
    eval_every: int = 50  # evaluate every this many steps (0: never)
    eval_at_start: bool = True  # with eval_every > 0: evaluate the starting policy before step 1
    final_eval: bool = True  # evaluate once more at the end (if the last step was not an eval step)
    eval_samples: int = 8  # k for avg@k / pass@k
    eval_temperature: float = 1.0  # evaluation sampling temperature
    save_every: int = 0  # checkpoint every this many steps (0: never)
    resume: Optional[str] = None  # null, auto (latest checkpoint of this run), or a checkpoint / run path or URI
    max_restarts: int = 1  # a dead queue/learner actor or a broken collective: rebuild from the last checkpoint this many times
    # run directories go here: a folder (shared by every node on a cluster) or a storage URI (s3://, gs://,
    # hdfs://, file://) that pyarrow.fs opens; with a URI each node stages files in trainer.staging_dir
    output_dir: str = "runs"
    staging_dir: Optional[str] = None  # with a storage URI: each node's local folder for files on their way (null: <tmp>/ada_ray_staging)
    run_name: Optional[str] = None  # run directory name (default: time + algorithm); fix it to resume
    seed: int = 0  # seeds work items (sampling), data order and evaluation
    ray_address: Optional[str] = None  # default: $RAY_ADDRESS, else a local cluster on 127.0.0.1
    ray_num_cpus: Optional[int] = None  # logical CPUs of a local cluster (default: the machine's cores; more runs oversubscribed)
    progress: str = "auto"  # progress display (auto: rich on a terminal, plain lines otherwise)


@dataclass
class TrackingConfig:
    enabled: bool = True  # MLflow tracking (metrics.jsonl is always written)
    uri: Optional[str] = None  # default: $MLFLOW_TRACKING_URI, else sqlite in the run dir
    experiment: str = "ada_ray"  # MLflow experiment name


@dataclass
class PrepareConfig:
    """`ada-ray prepare-data`: the paper's offline pass-rate filter of the training prompts."""

    samples_per_prompt: int = 16  # k responses per prompt from the base policy (model.path)
    max_pass_rate: float = 0.313  # keep prompts whose pass rate is <= this (paper: 0.313 standard, 0.125 hard)
    min_correct: int = 1  # ... and that have at least this many correct responses
    temperature: Optional[float] = None  # sampling temperature (null: sampler.temperature)
    # filtered JSONL written here (null: <trainer.output_dir>/prepared/train.jsonl); the per-prompt
    # scores go to <output>.scores.jsonl as they are made, so an interrupted run resumes there
    output: Optional[str] = None
    chunk_prompts: int = 256  # prompts generated and recorded per chunk (the unit of progress and resume)


@dataclass
class AdaRayConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    prepare: PrepareConfig = field(default_factory=PrepareConfig)


CHOICES: dict[str, tuple[str, ...]] = {
    "data.source": ("embedded", "jsonl", "parquet", "hf_disk"),
    "data.answer_order": ("msb_first", "lsb_first"),
    "data.prompt_template": ("raw", "math_boxed"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "algo.name": ALGORITHMS,
    "algo.est_weight": ("inv_sqrt", "inv"),
    "algo.park_need": ("exit", "pair"),
    "algo.loss_agg": ("token_mean", "seq_mean_token_mean"),
    "sampler.engine": ("vllm",),
    "sampler.payload_transport": ("object_store", "inline"),
    "sampler.queue_relay": ("auto", "per_node", "direct"),
    "learner.dtype": ("auto", "float32", "bfloat16"),
    "weight_sync.backend": ("auto", "gloo", "nccl"),
    "weight_sync.packing": ("auto", "per_tensor", "flat", "hybrid"),
    "trainer.mode": ("async", "sync"),
    "trainer.prompt_order": ("sequential", "hardest_first", "weighted"),
    "trainer.progress": ("auto", "rich", "plain", "off"),
}

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
