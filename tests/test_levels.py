"""ada_ray.levels: the TxD grammar shared by config and the embedded task, and config's import graph."""

import subprocess
import sys

import pytest

from ada_ray import levels
from ada_ray.data import embedded_task


def test_parse_level_examples():
    assert levels.parse_level("3x2") == (3, 2)
    assert levels.parse_level("8X6") == (8, 6)
    for bad in ("3", "ax2", "1x1", "9x1", "2x7", "2x0"):
        with pytest.raises(ValueError):
            levels.parse_level(bad)


def test_embedded_task_re_exports_the_same_objects():
    assert embedded_task.parse_level is levels.parse_level
    assert embedded_task.HELD_OUT_PER_LEVEL == levels.HELD_OUT_PER_LEVEL == 200


def test_config_imports_no_data_module():
    code = ("import sys, ada_ray.config; bad = [m for m in sys.modules if m.startswith('ada_ray.data')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
