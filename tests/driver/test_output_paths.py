"""ada_ray/driver/output_paths.py: a relative trainer.output_dir never lands in a Ray job's temporary package."""

from pathlib import Path

from ada_ray.driver.output_paths import resolve_output_dir

JOB_PKG = Path("/tmp/ray/session_2026/runtime_resources/working_dir_files/_ray_pkg_0123abcd")


def test_relative_path_under_the_current_dir(tmp_path):
    assert resolve_output_dir("runs", cwd=tmp_path, env={}) == ((tmp_path / "runs").resolve(), None)


def test_relative_path_inside_a_ray_job_package_goes_home():
    path, note = resolve_output_dir("runs", cwd=JOB_PKG, env={})
    assert path == (Path("~/ada_ray_runs").expanduser() / "runs").resolve()
    assert "Ray job" in note and str(JOB_PKG) in note and "ADA_RAY_OUTPUT" in note


def test_env_base_wins_for_relative_paths(tmp_path):
    assert resolve_output_dir("runs", cwd=JOB_PKG, env={"ADA_RAY_OUTPUT": str(tmp_path)}) == \
        ((tmp_path / "runs").resolve(), None)


def test_absolute_and_home_paths_are_used_as_given(tmp_path):
    assert resolve_output_dir(str(tmp_path / "x"), cwd=JOB_PKG, env={"ADA_RAY_OUTPUT": "/elsewhere"}) == \
        ((tmp_path / "x").resolve(), None)
    assert resolve_output_dir("~/r", cwd=JOB_PKG, env={})[0] == Path("~/r").expanduser().resolve()

