"""Writes docs/CONFIG.md, the config reference, from the schema in ada_ray/config_schema.py (every key,
its type, default and the comment beside it). `python -m ada_ray.config_doc` regenerates it; a test
keeps the committed file in step with the schema."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

from ada_ray import config as C

SECTIONS = [("data", C.DataConfig), ("model", C.ModelConfig), ("model.embedded", C.EmbeddedModelConfig),
            ("model.warmstart", C.WarmStartConfig), ("algo", C.AlgoConfig), ("sampler", C.SamplerConfig),
            ("learner", C.LearnerConfig), ("weight_sync", C.WeightSyncConfig), ("trainer", C.TrainerConfig),
            ("tracking", C.TrackingConfig), ("prepare", C.PrepareConfig)]


def _comments(cls) -> dict[str, str]:
    """Field name -> the comment on its line, or on the comment lines right above it."""
    lines = inspect.getsource(cls).splitlines()
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            pending.append(s.lstrip("# ").strip())
            continue
        m = re.match(r"(\w+): [^=]+=", s)
        if m:
            inline = s.split("#", 1)[1].strip() if "#" in s and not s.split("#", 1)[0].count('"') % 2 else ""
            out[m.group(1)] = " ".join(pending + ([inline] if inline else []))
        pending = [] if not s.startswith("#") else pending
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    else:
        v = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(v):
            return "(section)"
    return "null" if v is None else repr(v).replace("|", "\\|")


def render() -> str:
    out = ["# Configuration reference", "",
           "Generated from `ada_ray/config_schema.py` by `python -m ada_ray.config_doc`. Set any key in a YAML preset",
           "(`conf/`) or on the command line as `section.key=value`. Allowed values of choice keys are",
           "checked before anything starts; so are the combinations listed in `ada_ray.config_checks.validate`.", ""]
    for name, cls in SECTIONS:
        out += [f"## `{name}`", "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        notes = _comments(cls)
        for f in dataclasses.fields(cls):
            d = _default(f)
            if d == "(section)":
                continue
            key = f"{name}.{f.name}"
            meaning = notes.get(f.name, "")
            if key in C.CHOICES:
                meaning = (meaning + " " if meaning else "") + "one of: " + ", ".join(C.CHOICES[key])
            meaning = meaning.replace("|", "\\|")
            out.append(f"| `{key}` | `{str(f.type).replace('|', chr(92) + '|')}` | `{d}` | {meaning} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    path = Path(__file__).resolve().parent.parent / "docs" / "CONFIG.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(render())
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
