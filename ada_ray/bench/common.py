"""Shared helpers: results folder, machine description, JSON writing, the batch the run benches use."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

# prompts per step for the benches that time training runs (system, soak): BENCHMARKS.md's tables were
# measured at 32; the default config trains 64
BATCH_PROMPTS = 32

# the synthetic queue benches' sizes (scale, its Ray floor)
PROMPT_TOKENS = 32  # token ids per synthetic prompt (they live outside the queue: the prompt table)
COMPLETION_TOKENS = 8  # per synthetic sample


def machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    except OSError:
        commit = ""
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M")}


def write_result(out_dir: Path, name: str, result: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"bench": name, "machine": machine(), **result}
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def finish_eval_figure(fig, axes, title: str, path: Path) -> Path:
    """The eval-curve figures' common ending: labels, grid, legend on each axis, the title, the PNG."""
    import matplotlib.pyplot as plt

    for a in axes:
        a.set_ylabel("held-out avg@16 (mean over seeds)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def bar_chart(path: Path, title: str, ylabel: str, groups: dict[str, dict[str, float]]) -> Path:
    """Grouped bars: one group per key of `groups`, one bar per series inside it. Returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = list(dict.fromkeys(s for g in groups.values() for s in g))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 2), 4))
    for i, s in enumerate(series):
        xs = [j + i * width for j in range(len(groups))]
        ax.bar(xs, [g.get(s, 0.0) for g in groups.values()], width, label=s)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels(list(groups), rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def md_table(columns: list[str], rows: list[list]) -> str:
    """A Markdown table: a header of `columns`, then one line per row (cells as they are given)."""
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
