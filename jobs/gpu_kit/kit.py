"""The GPU kit: what a lent GPU machine lacks (vLLM, Ray, DeepSpeed, MLflow, OmegaConf and their
requirements), carried in as a few numbered parts small enough to travel with the working tree.

A lent machine has Python 3.12, torch 2.11.0+cu130 and transformers, no package registry, and takes at
most 64 MiB of files a command (../shared/docs/gpu_kit_notes.md). Standard library only: the install
side runs on the device's bare Python.

    python jobs/gpu_kit/kit.py build   [--pins F ...] [--out DIR] [--part-mb 56] [--wheels DIR] [--keep-all]
        on a machine with registry access: download the pinned wheels for CPython 3.12 / manylinux
        x86_64 (pip download --no-deps), build DeepSpeed's pure-Python wheel (DS_BUILD_OPS=0), drop the
        wheels the colocated train never imports (TRIM), unpack every wheel into one tar (zip-deflated
        wheels barely compress again; their unpacked files do), xz it, and split it into numbered parts
        of at most --part-mb MiB with a manifest (sha256 of every part). --wheels DIR packs the wheels
        found there instead of downloading (tests use small ones).
    python jobs/gpu_kit/kit.py plan    [--out DIR]
        the parts, their sizes, the transfers they take and the device seconds expected.
    python jobs/gpu_kit/kit.py install [--out DIR] [--venv DIR] [--check vllm,ray,...] [--project DIR]
        on the device: check every part against the manifest (a missing or damaged part is named),
        stream them through lzma and tar back into wheels (stored zips), make a venv that sees the
        image's packages (--system-site-packages: its torch and CUDA), install the wheels offline
        (--no-index --no-deps) and the project (--no-build-isolation), then import each --check module.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS = HERE / "pins.txt"  # vLLM 0.26.0 (torch 2.11.0), Ray, DeepSpeed's requirements, MLflow, OmegaConf
PROJECT_PINS = HERE / "pins_project.txt"  # what ada_ray itself imports that the image may lack (the embedded task, rewards)
PYTHON_VERSION = "3.12"
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64", "linux_x86_64"]
# what vLLM imports only for features the colocated train does not use (gpu_kit_notes.md), and numba,
# whose pin wants numpy < 2.5 (the device has 2.5.2; vLLM imports it only for n-gram speculation)
TRIM = ("tilelang", "tokenspeed-mla", "tokenspeed-triton", "humming-kernels", "torchcodec", "pynvvideocodec",
        "nvidia-cutlass-dsl-libs-cu12", "numba", "llvmlite")
# source-only on PyPI: built here with a CPython 3.12 (DeepSpeed as a pure-Python wheel, DS_BUILD_OPS=0)
EXTRA_BUILT = ("deepspeed==0.19.8", "cellpylib==2.4.0", "pycosat==0.6.6", "zss==1.2.0")
CHECK = ("vllm", "ray", "deepspeed", "omegaconf", "mlflow", "reasoning_gym", "math_verify")
PART_PREFIX = "kit.tar.xz."
MANIFEST = "manifest.json"
# device time (gpu_kit_notes.md, estimated): machine start, then each transfer (copy and gap)
START_S, TRANSFER_S = 90.0, 30.0


class KitError(RuntimeError):
    """What went wrong, naming the part, wheel or module."""


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def read_pins(path: Path) -> list[str]:
    pins = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    bad = [p for p in pins if "==" not in p]
    if bad:
        raise KitError(f"{path}: every line must be name==version, got {bad[:3]}")
    return pins


def trimmed(pins: list[str], keep_all: bool = False) -> list[str]:
    return pins if keep_all else [p for p in pins if norm(p.split("==")[0]) not in {norm(t) for t in TRIM}]


def build_python() -> str:
    """A CPython 3.12 to build the source-only packages with (their wheels must match the device's Python):
    $KIT_PYTHON312, this interpreter, python3.12 on PATH or a pyenv 3.12 - the first that runs as 3.12."""
    import glob

    cands = [os.environ.get("KIT_PYTHON312", ""), sys.executable, shutil.which("python3.12") or "",
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]
    for py in filter(None, cands):
        r = subprocess.run([py, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == "True":
            return py
    raise KitError("building the kit needs a CPython 3.12 (set KIT_PYTHON312, or put python3.12 on PATH) for the "
                   f"source-only packages {', '.join(EXTRA_BUILT)}")


def download(pins: list[str], dest: Path) -> None:
    """The pinned wheels for CPython 3.12 on manylinux x86_64, no dependencies resolved (the list is resolved),
    and the source-only ones built with a CPython 3.12."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
           PYTHON_VERSION, "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + pins, check=True)
    py = build_python()
    for spec in EXTRA_BUILT:
        subprocess.run([py, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), spec], check=True,
                       env=dict(os.environ, DS_BUILD_OPS="0"))


def pack(wheels: list[Path], out: Path, part_bytes: int, preset: int = 9 | lzma.PRESET_EXTREME) -> dict:
    """Every wheel's files into one tar (member path: <wheel file name>/<path in the wheel>), xz, split."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(PART_PREFIX + "*"):
        old.unlink()
    stream = out / "kit.tar.xz"
    t0 = time.time()
    raw = 0
    with _xz_writer(stream, preset) as xz, tarfile.open(fileobj=xz, mode="w|") as tar:
        for whl in wheels:
            raw += whl.stat().st_size
            with zipfile.ZipFile(whl) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    data = z.read(info)
                    ti = tarfile.TarInfo(f"{whl.name}/{info.filename}")
                    ti.size = len(data)
                    ti.mode = (info.external_attr >> 16) & 0o777 or 0o644
                    tar.addfile(ti, io.BytesIO(data))
    parts = []
    with open(stream, "rb") as fh:
        i = 0
        while chunk := fh.read(part_bytes):
            p = out / f"{PART_PREFIX}{i:03d}"
            p.write_bytes(chunk)
            parts.append({"name": p.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
            i += 1
    whole = hashlib.sha256(stream.read_bytes()).hexdigest()
    stream.unlink()
    manifest = {"wheels": [w.name for w in wheels], "wheel_bytes": raw, "parts": parts, "sha256": whole,
                "part_bytes": part_bytes, "pack_seconds": round(time.time() - t0, 1), "python": PYTHON_VERSION}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


class _XzPipe:
    """Writes through the xz program on all cores (same .xz format; python's lzma uses one core)."""

    def __init__(self, path: Path, preset: int):
        level = f"-{preset & 0x1F}" + ("e" if preset & lzma.PRESET_EXTREME else "")
        self.fh = open(path, "wb")
        self.proc = subprocess.Popen(["xz", level, "-T0", "-c"], stdin=subprocess.PIPE, stdout=self.fh)

    def write(self, data) -> int:
        return self.proc.stdin.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        rc = self.proc.wait()
        self.fh.close()
        if rc != 0 and exc[0] is None:
            raise KitError(f"xz exited {rc}")


def _xz_writer(path: Path, preset: int):
    return _XzPipe(path, preset) if shutil.which("xz") else lzma.open(path, "wb", preset=preset)


def plan(out: Path) -> dict:
    m = json.loads((out / MANIFEST).read_text())
    total = sum(p["bytes"] for p in m["parts"])
    n = len(m["parts"])
    return {"wheels": len(m["wheels"]), "wheel_mib": round(m["wheel_bytes"] / 2**20, 1),
            "kit_mib": round(total / 2**20, 1), "parts": n, "transfers": n,
            "device_seconds_before_install": START_S + TRANSFER_S * n}


def verify(out: Path) -> dict:
    """The manifest, with every part present and whole; a missing or damaged part is named."""
    mpath = out / MANIFEST
    if not mpath.is_file():
        raise KitError(f"{mpath}: no manifest; carry the kit's {MANIFEST} with its parts")
    m = json.loads(mpath.read_text())
    missing = [p["name"] for p in m["parts"] if not (out / p["name"]).is_file()]
    if missing:
        raise KitError(f"{out}: parts missing: {', '.join(missing)} (of {len(m['parts'])}); send them and run again")
    for p in m["parts"]:
        data = (out / p["name"]).read_bytes()
        if len(data) != p["bytes"] or hashlib.sha256(data).hexdigest() != p["sha256"]:
            raise KitError(f"{out / p['name']}: damaged ({len(data)} bytes, expected {p['bytes']} with sha256 "
                           f"{p['sha256'][:12]}...); send it again")
    return m


class _Parts(io.RawIOBase):
    """The parts read back to back as one stream."""

    def __init__(self, paths: list[Path]):
        self.paths = list(paths)
        self.fh = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while True:
            if self.fh is None:
                if not self.paths:
                    return 0
                self.fh = open(self.paths.pop(0), "rb")
            n = self.fh.readinto(buf)
            if n:
                return n
            self.fh.close()
            self.fh = None


def unpack(out: Path, wheel_dir: Path) -> list[Path]:
    """The wheels rebuilt from the parts (stored zips: pip reads them as it reads deflated ones)."""
    m = verify(out)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    stream = io.BufferedReader(_Parts([out / p["name"] for p in m["parts"]]), buffer_size=1 << 20)
    zips: dict[str, zipfile.ZipFile] = {}
    try:
        with lzma.open(stream, "rb") as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
            for ti in tar:
                whl, _, inner = ti.name.partition("/")
                if whl not in m["wheels"] or not inner or ".." in Path(inner).parts:
                    raise KitError(f"kit member {ti.name!r} is not a file of a wheel in the manifest")
                if whl not in zips:
                    zips[whl] = zipfile.ZipFile(wheel_dir / whl, "w", zipfile.ZIP_STORED)
                info = zipfile.ZipInfo(inner, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (ti.mode & 0o777 | 0o100000) << 16
                zips[whl].writestr(info, tar.extractfile(ti).read())
    finally:
        for z in zips.values():
            z.close()
    absent = sorted(set(m["wheels"]) - set(zips))
    if absent:
        raise KitError(f"the kit holds no files for {absent}")
    return [wheel_dir / w for w in m["wheels"]]


def install(out: Path, venv: Path, check: list[str], project: Path | None, python: str = sys.executable) -> dict:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gpu_kit_") as tmp:
        wheels = unpack(out, Path(tmp) / "wheels")
        t_unpack = time.time() - t0
        if not (venv / "bin" / "python").is_file():
            subprocess.run([python, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        vpy = str(venv / "bin" / "python")
        subprocess.run([vpy, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", *map(str, wheels)], check=True)
    if project is not None:  # the project on the venv's path (a .pth: no build backend needed offline)
        site = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "ada_ray_project.pth").write_text(str(project.resolve()) + "\n")
        check = [*check, "ada_ray.cli"]
    failed = {}
    for mod in check:
        r = subprocess.run([vpy, "-c", f"import {mod}; print(getattr({mod}, '__version__', ''))"],
                           capture_output=True, text=True, cwd=str(venv),  # not the caller's folder first on the path
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # nor the caller's path
        if r.returncode != 0:
            failed[mod] = (r.stderr.strip().splitlines() or ["?"])[-1][:300]
    report = {"venv": str(venv), "wheels": len(wheels), "unpack_s": round(t_unpack, 1),
              "install_s": round(time.time() - t0, 1), "imports_failed": failed}
    if failed:
        raise KitError(f"installed, but these do not import: {failed}")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("build", "plan", "install"))
    ap.add_argument("--out", type=Path, default=Path(".gpu_kit"), help="where the parts and manifest are")
    ap.add_argument("--pins", type=Path, nargs="+", default=[PINS, PROJECT_PINS])
    ap.add_argument("--wheels", type=Path, default=None, help="build: pack these wheels instead of downloading")
    ap.add_argument("--keep-all", action="store_true", help="build: do not drop the TRIM wheels")
    ap.add_argument("--part-mb", type=float, default=56.0, help="build: the largest part, MiB")
    ap.add_argument("--part-bytes", type=int, default=0, help="build: the largest part in bytes (tests)")
    ap.add_argument("--preset", type=int, default=9 | lzma.PRESET_EXTREME, help="build: xz preset")
    ap.add_argument("--venv", type=Path, default=Path(".venv-gpu"), help="install: the venv to make")
    ap.add_argument("--check", default=",".join(CHECK), help="install: modules that must import")
    ap.add_argument("--project", type=Path, default=None, help="install: put this project on the venv's path")
    a = ap.parse_args(argv)
    try:
        if a.command == "build":
            if a.wheels is None:
                a.wheels = a.out / "wheelhouse"
                download(trimmed([p for f in a.pins for p in read_pins(f)], a.keep_all), a.wheels)
            wheels = sorted(p for p in a.wheels.glob("*.whl")
                            if a.keep_all or norm(p.name.split("-")[0]) not in {norm(t) for t in TRIM})
            if not wheels:
                raise KitError(f"{a.wheels}: no wheels to pack")
            pack(wheels, a.out, a.part_bytes or int(a.part_mb * 2**20), a.preset)
            print(json.dumps(plan(a.out)))
        elif a.command == "plan":
            print(json.dumps(plan(a.out)))
        else:
            print(json.dumps(install(a.out, a.venv, [m for m in a.check.split(",") if m], a.project)))
    except KitError as e:
        print(f"gpu kit: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
