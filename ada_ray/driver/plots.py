"""PNG training curves from a run's metrics.jsonl (matplotlib, headless): reward vs step and vs
generated samples, zero-signal share, samples per prompt, active prompts after each round, and the
pool pass-rate (p-hat) histogram early vs late in the run."""

from __future__ import annotations

import json
from pathlib import Path

PHAT_BINS = ("0", "(0,0.25]", "(0.25,0.75]", "(0.75,1)", "1")


def read_metrics(path: Path) -> list[dict]:
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        if key in r and r[key] == r[key]:
            xs.append(r["step"])
            ys.append(r[key])
    return xs, ys


def make_plots(run_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    train = [r for r in rows if "train/round0_reward" in r]
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    written: list[Path] = []

    def save(fig, name: str) -> None:
        p = out_dir / name
        fig.tight_layout()
        fig.savefig(p, dpi=100)
        plt.close(fig)
        written.append(p)

    if train:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        xs, ys = _series(train, "train/round0_reward")
        axes[0].plot(xs, ys, label="round-0 reward (train)")
        ex, ey = _series(rows, next((k for r in rows for k in r if k.startswith("eval/avg@") and "/" not in k[5:]), "none"))
        if ex:
            axes[0].plot(ex, ey, "o-", label="eval avg@k")
        axes[0].set_xlabel("step")
        axes[0].legend()
        cum, total = [], 0.0
        for r in train:
            total += r.get("train/samples_generated", 0.0)
            cum.append(total)
        axes[1].plot(cum, ys)
        axes[1].set_xlabel("generated samples")
        axes[1].set_ylabel("round-0 reward")
        save(fig, "reward.png")

        fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
        axes[0].plot(*_series(train, "train/zero_signal_share"))
        axes[0].set_title("zero-signal share of kept groups")
        axes[1].plot(*_series(train, "train/samples_per_prompt"))
        axes[1].set_title("generated samples per prompt")
        rounds = sorted({k for r in train for k in r if k.startswith("train/active_after_round_")},
                        key=lambda k: int(k.rsplit("_", 1)[1]))
        for k in rounds:
            axes[2].plot(*_series(train, k), label=f"after round {k.rsplit('_', 1)[1]}")
        axes[2].set_title("active prompts")
        if rounds:
            axes[2].legend(fontsize=7)
        for a in axes:
            a.set_xlabel("step")
        save(fig, "sampling.png")

        fig, ax = plt.subplots(figsize=(6, 3.5))
        n = max(1, len(train) // 10)
        for label, part in (("first 10%", train[:n]), ("last 10%", train[-n:])):
            vals = [sum(r.get(f"train/phat/{b}", 0.0) for r in part) / len(part) for b in PHAT_BINS]
            ax.bar([i + (0.2 if label == "last 10%" else -0.2) for i in range(len(PHAT_BINS))], vals, width=0.4,
                   label=label)
        ax.set_xticks(range(len(PHAT_BINS)), PHAT_BINS)
        ax.set_title("pool pass rate (p-hat) per prompt")
        ax.legend()
        save(fig, "phat_hist.png")
    return written
