"""`ada-ray` command line: ada-ray <command> [CONFIG] [key=value ...].

CONFIG is a YAML file or a preset name from conf/ (default: conf/default.yaml); key=value pairs
are dotted overrides (algo.n=8). Commands:
  train        run Reinforce-Ada / GRPO / DAPO training on Ray (driver: ada_ray.trainer)
  warmstart    build (or reuse) the embedded base policy and report its pass-rate histogram
  eval         avg@k and pass@k of a checkpoint (model.path) on the eval split
  show-config  print the resolved config
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ada_ray.config import ConfigError, load_config, to_yaml


def _split_args(rest: list[str]) -> tuple[str, list[str]]:
    config = "default"
    overrides = []
    for i, a in enumerate(rest):
        if i == 0 and "=" not in a:
            config = a
        else:
            overrides.append(a)
    return config, overrides


def cmd_show_config(cfg, args) -> int:
    print(to_yaml(cfg), end="")
    return 0


def _engine_and_prompts(cfg, split: str):
    from ada_ray.data.datasets import load_splits
    from ada_ray.data.warmstart import resolve_model_path
    from ada_ray.engines.vllm_engine import VLLMEngine
    from ada_ray.rewards import SafeScorer

    path = resolve_model_path(cfg, print)
    engine = VLLMEngine(path, cfg.sampler, "float32")
    train, evals = load_splits(cfg.data, engine.tokenizer)
    chosen = train if split == "train" else evals
    if chosen is None:
        raise ConfigError(f"no {split} split: set data.eval_path")
    scorer = SafeScorer(cfg.data.reward, cfg.data.reward_timeout_s, cfg.sampler.reward_workers)
    return path, engine, chosen.prompts, scorer


def cmd_warmstart(cfg, args) -> int:
    from ada_ray.data.warmstart import ensure_embedded_policy
    from ada_ray.evaluate import evaluate_engine, format_result

    if cfg.model.path != "embedded":
        raise ConfigError("warmstart builds the embedded policy: model.path must be 'embedded'")
    t0 = time.time()
    path = ensure_embedded_policy(cfg, print)
    report = json.loads((Path(path) / "warmstart.json").read_text())
    print(f"embedded policy: {path}\n  built in {report['seconds']} s ({report['steps']} steps, "
          f"{report['params']:,} parameters, final loss {report['final_loss']:.3f}); this call {time.time() - t0:.1f} s")
    if args.report_k > 0:
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


def cmd_train(cfg, args) -> int:
    from ada_ray.trainer import train

    return train(cfg)


COMMANDS = {"train": cmd_train, "warmstart": cmd_warmstart, "eval": cmd_eval, "show-config": cmd_show_config}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ada-ray", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--split", default=None, help="train or eval (warmstart: train; eval: eval)")
    parser.add_argument("--report-k", type=int, default=0, help="warmstart: samples per prompt for the report")
    parser.add_argument("--k", type=int, default=0, help="eval: samples per prompt (default trainer.eval_samples)")
    parser.add_argument("--json", default=None, help="eval: also write the result as JSON here")
    args, rest = parser.parse_known_args(argv)
    unknown_flags = [r for r in rest if r.startswith("--")]
    if unknown_flags:
        parser.error(f"unknown option(s) {unknown_flags}; config settings are given as key=value")
    if args.split is None:
        args.split = "train" if args.command == "warmstart" else "eval"
    config, overrides = _split_args(rest)
    try:
        cfg = load_config(config, overrides)
        return COMMANDS[args.command](cfg, args)
    except ConfigError as exc:
        print(f"ada-ray: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"ada-ray: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
