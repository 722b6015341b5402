"""The one config schema of ada_ray: dataclasses + OmegaConf.

Owns: every knob (data, model, algo, sampler, learner, weight sync, trainer, tracking), loading YAML
presets from conf/ (with a small ``defaults: [other.yaml]`` list for inheritance), dotted
``key=value`` overrides from the command line, and validation. Every mistake - an unknown key, a
wrong type, an impossible combination - is reported as one :class:`ConfigError` naming the key and
what was expected, before anything starts.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from ada_ray.algo.defaults import effective_k_neg, effective_k_pos
from ada_ray.errors import InputError
from ada_ray.levels import HELD_OUT_PER_LEVEL, parse_level

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
    reward_workers: int = 0  # 0: score in the sampler's thread; >0: a process pool (bounds hangs)
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
    "algo.loss_agg": ("token_mean", "seq_mean_token_mean"),
    "sampler.engine": ("vllm",),
    "learner.dtype": ("auto", "float32", "bfloat16"),
    "weight_sync.backend": ("auto", "gloo", "nccl"),
    "weight_sync.packing": ("auto", "per_tensor", "flat", "hybrid"),
    "trainer.mode": ("async", "sync"),
    "trainer.prompt_order": ("sequential", "hardest_first", "weighted"),
    "trainer.progress": ("auto", "rich", "plain", "off"),
}

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------


MAPPINGS = ("sampler.resources", "learner.resources")  # keys that hold a mapping of any names


def _schema() -> DictConfig:
    cfg = OmegaConf.structured(AdaRayConfig)
    OmegaConf.set_struct(cfg, True)
    for key in MAPPINGS:
        OmegaConf.set_struct(OmegaConf.select(cfg, key), False)
    return cfg


def _valid_keys(prefix: str) -> list[str]:
    node = OmegaConf.select(_schema(), prefix) if prefix else _schema()
    return sorted(node.keys()) if isinstance(node, DictConfig) else []


def _field_type(key: str) -> str:
    """The annotated type of a dotted schema key, e.g. 'int' for 'algo.n'."""
    cls: Any = AdaRayConfig
    for part in key.split("."):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        f = fields[part]
        if f.default_factory is not dataclasses.MISSING:  # nested section or list
            value = f.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(value):
                cls = type(value)
                continue
        return str(f.type).replace("Optional[", "null or ").rstrip("]") if "Optional" in str(f.type) else str(f.type)
    return "a section (mapping)"


def _explain(exc: OmegaConfBaseException, source: str) -> ConfigError:
    key = getattr(exc, "full_key", None) or ""
    msg = str(exc).splitlines()[0]
    if isinstance(exc, ConfigKeyError) or " not in '" in msg:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        where = f"under '{parent}'" if parent else "at the top level"
        return ConfigError(f"{source}: unknown config key '{key}'; valid keys {where}: {', '.join(_valid_keys(parent))}")
    if key:
        try:
            expected = _field_type(key)
        except (KeyError, TypeError):
            expected = "the type in ada_ray/config.py"
        return ConfigError(f"{source}: bad value for '{key}': {msg} (expected {expected})")
    return ConfigError(f"{source}: {msg}")


def _load_yaml(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, DictConfig]]:
    """A YAML file and the files its ``defaults`` list names, base files first."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'defaults' forms a cycle ({' -> '.join(str(p) for p in seen + (path,))})")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        node = OmegaConf.load(path)
    except Exception as exc:  # yaml syntax errors
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if node is None or (isinstance(node, DictConfig) and len(node) == 0):
        return []
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{path}: expected a mapping at the top level, got a {type(node).__name__}")
    out: list[tuple[str, DictConfig]] = []
    if "defaults" in node:
        bases = node.pop("defaults")
        if isinstance(bases, str):
            bases = [bases]
        if not isinstance(bases, (list, ListConfig)):
            raise ConfigError(f"{path}: 'defaults' must be a list of YAML paths relative to this file")
        for base in bases:
            out.extend(_load_yaml(path.parent / str(base), seen + (path,)))
    out.append((str(path), node))
    return out


def resolve_config_path(name: str | os.PathLike | None) -> Optional[Path]:
    """A config argument: a path, or a preset name found in conf/ (with or without .yaml)."""
    if name is None:
        return None
    p = Path(name)
    if p.is_file():
        return p
    for cand in (CONF_DIR / p, CONF_DIR / f"{p}.yaml", CONF_DIR / p.name):
        if cand.is_file():
            return cand
    raise ConfigError(f"config file not found: {name} (looked in . and {CONF_DIR})")


def parse_overrides(overrides: list[str]) -> DictConfig:
    for ov in overrides:
        if "=" not in ov or ov.startswith("="):
            raise ConfigError(f"command line: override '{ov}' is not of the form key=value (e.g. algo.n=8)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"command line: cannot parse overrides: {exc}") from None


def load_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    *,
    validate_config: bool = True,
    base: Optional[dict] = None,
) -> AdaRayConfig:
    """Schema defaults <- `base` (a saved config) <- YAML (and its defaults list) <- dotted
    overrides, then validation."""
    cfg = _schema()
    layers: list[tuple[str, Any]] = [("saved config", OmegaConf.create(base))] if base else []
    p = resolve_config_path(path)
    if p is not None:
        layers.extend(_load_yaml(p))
    if overrides:
        layers.append(("command line", parse_overrides(list(overrides))))
    for source, layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except OmegaConfBaseException as exc:
            raise _explain(exc, source) from None
    try:
        obj: AdaRayConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise _explain(exc, "config") from None
    if obj.trainer.progress == "False":  # YAML 1.1 reads a bare `off` as false
        obj.trainer.progress = "off"
    if validate_config:
        validate(obj)
    return obj


def to_yaml(cfg: AdaRayConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: AdaRayConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def from_dict(d: dict[str, Any]) -> AdaRayConfig:
    """Rebuild a config from :func:`to_dict` output (checkpoints, Ray actors)."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(_schema(), d))  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise _explain(exc, "saved config") from None


def flatten(cfg: AdaRayConfig) -> dict[str, Any]:
    """Dotted-key view, e.g. {'algo.n': 4, ...} (MLflow params)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = node

    walk("", to_dict(cfg))
    return out


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
