"""jobs/gpu_kit/kit.py's round trip on the CPU machine, with small wheels standing in for the big ones:
build (pack, xz, split) -> parts -> install (verify, reassemble, rebuild the wheels, offline install
into a fresh venv, import check). A missing or damaged part is named, not installed."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parent.parent / "jobs" / "gpu_kit" / "kit.py"


def load_kit():
    spec = importlib.util.spec_from_file_location("gpu_kit", KIT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid pure-Python wheel (METADATA, WHEEL, RECORD with hashes)."""
    import zipfile

    dist = f"{name}-{version}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    whl = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return whl


@pytest.fixture
def small_kit(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "kita", "1.0", {"kita/__init__.py": b"VALUE = 'a'\n"})
    make_wheel(wheels, "kitb", "2.0", {"kitb/__init__.py": b"from kita import VALUE\n",
                                       "kitb/blob.bin": os.urandom(40_000)})  # incompressible: several parts
    make_wheel(wheels, "tilelang", "0.1.9", {"tilelang/__init__.py": b""})  # trimmed by default
    out = tmp_path / "kit"
    rc = load_kit().main(["build", "--wheels", str(wheels), "--out", str(out), "--part-bytes", "16384", "--preset", "6"])
    assert rc == 0
    return out


def test_build_trims_packs_and_splits(small_kit):
    kit = load_kit()
    m = json.loads((small_kit / kit.MANIFEST).read_text())
    assert m["wheels"] == ["kita-1.0-py3-none-any.whl", "kitb-2.0-py3-none-any.whl"]  # tilelang dropped
    assert len(m["parts"]) >= 3 and all(p["bytes"] <= 16384 for p in m["parts"])
    plan = kit.plan(small_kit)
    assert plan["transfers"] == len(m["parts"]) and plan["device_seconds_before_install"] == 90 + 30 * len(m["parts"])


@pytest.mark.slow
def test_round_trip_installs_offline_and_imports(small_kit, tmp_path):
    venv = tmp_path / "venv"
    project = tmp_path / "project"  # a stand-in for the repository: --project puts it on the venv's path
    (project / "ada_ray").mkdir(parents=True)
    (project / "ada_ray" / "__init__.py").write_text("")
    (project / "ada_ray" / "cli.py").write_text("OK = 1\n")
    r = subprocess.run([sys.executable, str(KIT), "install", "--out", str(small_kit), "--venv", str(venv),
                        "--check", "kita,kitb", "--project", str(project)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["wheels"] == 2 and report["imports_failed"] == {}
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import kitb, pathlib; print(kitb.VALUE, "
                          "pathlib.Path(kitb.__file__).with_name('blob.bin').stat().st_size)"],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["a", "40000"]


@pytest.mark.slow
def test_import_check_sees_the_venv_alone(small_kit, tmp_path):
    """A module the caller's PYTHONPATH or working folder provides, but the kit does not, fails the check:
    on the device the check must prove the venv has it (CI sets no PYTHONPATH; a developer's shell may)."""
    on_path, here = tmp_path / "on_path", tmp_path / "here"
    on_path.mkdir()
    here.mkdir()
    (on_path / "kitc.py").write_text("")
    (here / "kitd.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(on_path)}
    r = subprocess.run([sys.executable, str(KIT), "install", "--out", str(small_kit), "--venv", str(tmp_path / "venv"),
                        "--check", "kita,kitc,kitd"], capture_output=True, text=True, timeout=300, env=env, cwd=here)
    assert r.returncode != 0
    assert "kitc" in r.stderr and "kitd" in r.stderr and "'kita'" not in r.stderr


def test_a_damaged_or_missing_part_is_named(small_kit, tmp_path, capsys):
    kit = load_kit()
    part = sorted(small_kit.glob(kit.PART_PREFIX + "*"))[1]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    assert kit.main(["install", "--out", str(small_kit), "--venv", str(tmp_path / "v"), "--check", ""]) == 2
    assert f"{part}: damaged" in capsys.readouterr().err
    part.unlink()
    assert kit.main(["install", "--out", str(small_kit), "--venv", str(tmp_path / "v"), "--check", ""]) == 2
    assert f"parts missing: {part.name}" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()  # nothing was installed


def test_unpack_rebuilds_wheels_pip_can_read(small_kit, tmp_path):
    import zipfile

    kit = load_kit()
    wheels = kit.unpack(small_kit, tmp_path / "w")
    assert [w.name for w in wheels] == ["kita-1.0-py3-none-any.whl", "kitb-2.0-py3-none-any.whl"]
    with zipfile.ZipFile(wheels[1]) as z:
        assert len(z.read("kitb/blob.bin")) == 40_000 and z.testzip() is None
