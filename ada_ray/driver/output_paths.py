"""Where a run's files go: `trainer.output_dir` resolved to a folder that outlives the process.

A relative output_dir is taken against `$ADA_RAY_OUTPUT` when that is set, else against the current
directory - except when the current directory is a Ray job's unpacked working dir (`ray job
submit --runtime-env ...` runs the driver inside `.../runtime_resources/working_dir_files/_ray_pkg_*`),
a cache that Ray deletes: there it goes under `~/ada_ray_runs` instead, and the caller is told why.
Absolute paths and `~` paths are used as given. A storage URI (s3://, ...) is not a folder here:
driver/run_storage.py takes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from ada_ray.config import ConfigError

DURABLE_DEFAULT = "~/ada_ray_runs"


def in_ray_job_package(path: Path) -> bool:
    parts = path.parts
    return any(p.startswith("_ray_pkg_") for p in parts) or "working_dir_files" in parts


def resolve_output_dir(output_dir: str, cwd: Optional[Path] = None,
                       env: Optional[Mapping[str, str]] = None) -> tuple[Path, Optional[str]]:
    """(the folder, a one-line note when the relative path was moved out of a Ray job package)."""
    if "://" in output_dir:
        raise ConfigError(f"trainer.output_dir={output_dir!r} is a storage URI, but this needs a local folder "
                          "(prepare-data: set prepare.output)")
    env = os.environ if env is None else env
    given = Path(output_dir).expanduser()
    if given.is_absolute():
        return given.resolve(), None
    if env.get("ADA_RAY_OUTPUT"):
        return (Path(env["ADA_RAY_OUTPUT"]).expanduser() / given).resolve(), None
    cwd = Path.cwd() if cwd is None else cwd
    if in_ray_job_package(cwd.resolve()):
        base = Path(DURABLE_DEFAULT).expanduser()
        return (base / given).resolve(), (
            f"trainer.output_dir {output_dir!r} is relative and this driver runs in a Ray job's temporary "
            f"working dir ({cwd}), which Ray deletes: writing to {base / given} instead (give an absolute or "
            f"shared path, or set $ADA_RAY_OUTPUT)")
    return (cwd / given).resolve(), None
