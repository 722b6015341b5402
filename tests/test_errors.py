"""ada_ray/errors.py: every error reported to a user is an AdaRayError with an exit code, still the
builtin it replaced; the CLI prints those on one line and lets anything else (a bug) raise."""

import pytest

from ada_ray import cli
from ada_ray.config import ConfigError
from ada_ray.data.datasets import DataError
from ada_ray.data.model_check import ModelError
from ada_ray.data.shipped_policy import ShippedPolicyError
from ada_ray.errors import AdaRayError, InputError


def test_every_user_error_has_one_base_and_its_builtin():
    from ada_ray.driver.cluster import ResourceError
    from ada_ray.driver.runtime import RuntimeFailure
    from ada_ray.driver.trainer import TrainingError

    for cls, builtin, code in ((ConfigError, ValueError, 2), (DataError, ValueError, 2),
                               (ModelError, FileNotFoundError, 2), (ShippedPolicyError, FileNotFoundError, 2),
                               (ResourceError, RuntimeError, 2), (TrainingError, RuntimeError, 1),
                               (RuntimeFailure, RuntimeError, 1)):
        assert issubclass(cls, AdaRayError) and issubclass(cls, builtin), cls
        assert cls("x").exit_code == code, cls
    assert issubclass(ConfigError, InputError)


def test_cli_reports_an_ada_ray_error_with_its_code(capsys):
    assert cli.main(["show-config", "trainer.no_such_key=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ada-ray: ") and "no_such_key" in err


def test_cli_reports_a_missing_checkpoint_as_a_model_error(tmp_path, capsys):
    assert cli.main(["eval", str(tmp_path)]) == 2
    assert "neither a training checkpoint" in capsys.readouterr().err


def test_cli_lets_a_bug_raise(monkeypatch):
    def bug(cfg, args):
        raise ValueError("a bug, not a user mistake")

    monkeypatch.setitem(cli.COMMANDS, "show-config", bug)
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["show-config"])


def test_bench_errors_use_the_same_base(capsys):
    assert cli.main(["bench", "paper", "methods=nope", "smoke=true"]) == 2
    assert "unknown methods" in capsys.readouterr().err
