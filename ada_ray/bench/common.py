"""Shared helpers: results folder, machine description, JSON writing."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path


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
