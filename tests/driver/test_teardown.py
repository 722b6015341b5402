"""trainer.teardown: a failure while shutting down never hides the error that ended the run."""

import pytest

from ada_ray import cli
from ada_ray.driver.trainer import TrainingError, teardown


def _boom(msg):
    def fn():
        raise RuntimeError(msg)
    return fn


def test_every_step_runs_and_the_cause_keeps_going_with_notes():
    ran = []
    cause = TrainingError("no cohort for step 7")
    teardown([("runtime shutdown", _boom("queue stop did not finish within 60s")),
              ("tracking close", lambda: ran.append("tracking")),
              ("cluster shutdown", _boom("ray.shutdown hung"))], cause)
    assert ran == ["tracking"]
    assert cause.__notes__ == [
        "while shutting down: runtime shutdown failed: RuntimeError: queue stop did not finish within 60s",
        "while shutting down: cluster shutdown failed: RuntimeError: ray.shutdown hung"]


def test_without_a_cause_the_first_failure_is_raised():
    with pytest.raises(RuntimeError, match="first") as info:
        teardown([("a", _boom("first")), ("b", _boom("second"))], None)
    assert info.value.__notes__ == ["while shutting down: b failed: RuntimeError: second"]
    teardown([("a", lambda: None)], None)  # nothing fails: nothing raised


def test_cli_prints_the_cause_first_then_the_notes(monkeypatch, capsys):
    def command(cfg, args):
        exc = TrainingError("no cohort for step 7")
        teardown([("runtime shutdown", _boom("queue stop did not finish within 60s"))], exc)
        raise exc

    monkeypatch.setitem(cli.COMMANDS, "show-config", command)
    assert cli.main(["show-config"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "ada-ray: no cohort for step 7"
    assert lines[1].startswith("ada-ray: while shutting down: runtime shutdown failed") and len(lines) == 2
