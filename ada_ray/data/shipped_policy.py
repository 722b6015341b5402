"""The embedded base policy as shipped with the package: identical weights on every machine.

The warm-start SFT is deterministic on one machine but not across CPUs (different BLAS kernels give
different floating-point sums, and 1,500 Adam steps amplify them: one Intel machine built a policy
scoring 0.327 avg@16 where an AMD one built 0.404). So the package carries the warm-started policy
(``ada_ray/data/embedded_policy/``: safetensors weights, config, char-level tokenizer) with a
manifest naming the recipe key it was built from and the SHA-256 of every file. ``model.path:
embedded`` loads it whenever the config asks for exactly that recipe; any other recipe is built
locally into the cache (``warmstart.py``). ``ada-ray warmstart --ship`` rebuilds the shipped folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Optional

from ada_ray.errors import InputError

SHIPPED_DIR = Path(__file__).resolve().parent / "embedded_policy"
MANIFEST = "manifest.json"


class ShippedPolicyError(InputError, FileNotFoundError):
    pass


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path = SHIPPED_DIR) -> Optional[dict]:
    p = folder / MANIFEST
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def verify(folder: Path = SHIPPED_DIR) -> dict:
    """The manifest, after checking every listed file's checksum; a clear error names the file."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ShippedPolicyError(f"{folder}: no {MANIFEST}: the shipped policy is missing")
    for name, want in manifest["sha256"].items():
        f = folder / name
        if not f.is_file():
            raise ShippedPolicyError(f"shipped policy {folder}: file {name} is missing (reinstall ada_ray, or "
                                     "`ada-ray warmstart --ship` to rebuild it)")
        got = sha256(f)
        if got != want:
            raise ShippedPolicyError(f"shipped policy {folder}: {name} has SHA-256 {got[:16]}..., the manifest says "
                                     f"{want[:16]}...: the file is corrupt or was changed (reinstall ada_ray, or "
                                     "`ada-ray warmstart --ship` to rebuild it)")
    return manifest


def shipped_for(key: str, folder: Path = SHIPPED_DIR) -> Optional[Path]:
    """The shipped folder if it was built from recipe `key` (checksums verified), else None."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("key") != key:
        return None
    verify(folder)
    return folder


def write_shipped(built: Path, key: str, recipe: dict, report: dict, folder: Path = SHIPPED_DIR) -> Path:
    """Replace the shipped folder by the policy in `built`, with a fresh manifest (atomic rename)."""
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(built, tmp)
    files = sorted(p.name for p in tmp.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {"key": key, "recipe": recipe, "build": report, "sha256": {n: sha256(tmp / n) for n in files}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder
