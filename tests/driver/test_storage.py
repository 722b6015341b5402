"""The storage layer without Ray: ada_ray/storage.py (folders and URIs through pyarrow.fs), the run's
storage (driver/run_storage.py: staging, push and pull), and checkpoints assembled at a file:// URI
as at an object store - parts, then COMPLETE, then `latest` - so a crash before COMPLETE leaves the
previous checkpoint the one a resume finds. The driver loop runs here against a fake runtime whose
"learners" write through the same layer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ada_ray import storage
from ada_ray.config import ConfigError, load_config
from ada_ray.driver import checkpoint as ckpt
from ada_ray.driver.run_files import RunFiles
from ada_ray.driver.run_setup import RunSetup
from ada_ray.driver.run_storage import RunStorage, not_shared, probe_problems
from ada_ray.driver.runtime import RuntimeFailure
from ada_ray.driver.trainer import LiveRuntime, train_with_restarts
from tests.driver.fakes import FakeRuntime, FakeTracker, cohort


def _cfg(tmp_path, *overrides):
    return load_config("conf/default.yaml", ["trainer.total_steps=6", "trainer.save_every=2", "trainer.eval_every=0",
                                             "trainer.progress=off", "trainer.run_name=run",
                                             f"trainer.output_dir=file://{tmp_path / 'store'}",
                                             f"trainer.staging_dir={tmp_path / 'stage'}", *overrides])


@pytest.mark.parametrize("kind", ["path", "uri"])
def test_files_through_a_path_or_a_file_uri(tmp_path, kind):
    base = str(tmp_path) if kind == "path" else f"file://{tmp_path}"
    loc = storage.join(base, "a", "b.txt")
    assert not storage.is_file(loc)
    storage.write_text(loc, "one")
    storage.write_text(loc, "two")  # replaced whole
    assert storage.read_text(loc) == "two" and storage.is_file(loc) and storage.is_dir(storage.join(base, "a"))
    assert storage.list_names(storage.join(base, "a")) == ["b.txt"]  # no temporary file left beside it
    assert storage.list_names(storage.join(base, "nothing")) == []
    storage.delete(storage.join(base, "a"))
    storage.delete(storage.join(base, "a"))  # twice: nothing there is fine
    assert not (tmp_path / "a").exists()


def test_a_uri_keeps_its_query_at_the_end():
    assert storage.join("s3://b/runs?region=eu-west-1", "r1", "x") == "s3://b/runs/r1/x?region=eu-west-1"
    assert storage.join("/srv/runs", "r1") == "/srv/runs/r1"


def test_writing_at_a_uri_stages_on_this_node_then_uploads(tmp_path):
    dest = f"file://{tmp_path / 'store' / 'part'}"
    stage = tmp_path / "stage"
    with storage.writing(dest, str(stage)) as local:
        assert stage in local.parents  # staged here, not yet at the storage location
        (local / "sub").mkdir()
        (local / "sub" / "w.bin").write_bytes(b"\x00\x01")
        assert not (tmp_path / "store").exists()
    assert (tmp_path / "store" / "part" / "sub" / "w.bin").read_bytes() == b"\x00\x01"
    with storage.reading(dest, str(stage)) as local:
        assert (local / "sub" / "w.bin").read_bytes() == b"\x00\x01"
    assert list(stage.iterdir()) == []  # staging folders are removed after use
    with pytest.raises(RuntimeError), storage.writing(f"file://{tmp_path / 'store' / 'failed'}", str(stage)):
        raise RuntimeError("the writer failed")
    assert not (tmp_path / "store" / "failed").exists()  # nothing uploaded from a failed block


def test_writing_to_a_folder_is_in_place(tmp_path):
    with storage.writing(str(tmp_path / "d")) as local:
        assert local == tmp_path / "d" and local.is_dir()
    with storage.reading(str(tmp_path / "d")) as local:
        assert local == tmp_path / "d"


def test_unknown_scheme_and_unopenable_storage_are_one_line_naming_the_field():
    with pytest.raises(ConfigError, match=r"^trainer.output_dir='foo://x/runs': unknown storage scheme 'foo'; "
                                          r"pyarrow.fs opens s3://, gs://"):
        storage.open_location("foo://x/runs")
    with pytest.raises(storage.StorageError) as err:  # no HDFS client (libjvm) on this machine
        storage.open_location("hdfs://127.0.0.1:9/runs", "trainer.resume")
    assert str(err.value).startswith("trainer.resume='hdfs://127.0.0.1:9/runs': cannot open this storage (")
    assert "\n" not in str(err.value) and err.value.exit_code == 2


def test_a_uri_run_is_staged_under_a_path_every_node_computes_alike(tmp_path):
    cfg = _cfg(tmp_path)
    run = RunStorage.for_config(cfg)
    assert run.is_uri and run.root == f"file://{tmp_path / 'store' / 'run'}"
    assert run.local.name == "run" and tmp_path / "stage" in run.local.parents
    assert RunStorage.for_config(cfg).local == run.local
    assert not (tmp_path / "store" / "run" / ".write_probe").exists()  # the driver's probe is cleaned up
    folder = RunStorage.for_config(load_config(None, [f"trainer.output_dir={tmp_path / 'runs'}", "trainer.run_name=r"]))
    assert not folder.is_uri and folder.local == tmp_path / "runs" / "r" and folder.root == str(folder.local)


def test_push_mirrors_the_run_files_and_pull_brings_them_to_another_node(tmp_path):
    run = RunStorage.for_config(_cfg(tmp_path))
    run.local.mkdir(parents=True)
    (run.local / "metrics.jsonl").write_text('{"step": 1}\n')
    (run.local / "plots").mkdir()
    (run.local / "plots" / "reward.png").write_bytes(b"png")
    for kept_here in ("mlartifacts", ".final_ds"):
        (run.local / kept_here).mkdir()
        (run.local / kept_here / "big").write_text("x")
    run.push()
    assert sorted(storage.list_names(run.root)) == ["metrics.jsonl", "plots"]
    other = RunStorage.for_config(_cfg(tmp_path, f"trainer.staging_dir={tmp_path / 'node2'}"))
    (other.local.parent).mkdir(parents=True, exist_ok=True)
    other.pull()
    assert (other.local / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (other.local / "plots" / "reward.png").read_bytes() == b"png"


def _save(run, step, rt, cfg):
    return ckpt.save(run, step, cfg, rt, "model-path", {"mlflow_run_id": None, "generated_samples": 8.0 * step})


@pytest.mark.parametrize("kind", ["path", "uri"])
def test_a_crash_before_complete_leaves_the_previous_checkpoint_latest(tmp_path, kind):
    cfg = _cfg(tmp_path)
    run = RunStorage.for_config(cfg) if kind == "uri" else RunStorage(str(tmp_path / "run"), tmp_path / "run")
    rt = FakeRuntime([])
    first = _save(run, 2, rt, cfg)
    assert ckpt.find_latest(run.root) == first == run.location("checkpoints", "step_2")

    def crash():
        raise RuntimeFailure("queue state did not finish within 300s")

    rt.queue_state = crash  # the learners' parts are written, the driver's are not
    with pytest.raises(RuntimeFailure):
        _save(run, 4, rt, cfg)
    assert ckpt.find_latest(run.root) == first
    assert json.loads(storage.read_text(run.location("checkpoints", "latest")))["path"] == "step_2"
    half = run.location("checkpoints", "step_4" if kind == "uri" else ".step_4.tmp")
    assert storage.is_dir(storage.join(half, "learner")) and not ckpt.is_complete(half)
    storage.write_text(run.location("checkpoints", "latest"), "{torn")  # a pointer that cannot be read ...
    assert ckpt.find_latest(run.root) == first  # ... is passed over for the highest complete step
    del rt.queue_state
    assert _save(run, 4, rt, cfg) == ckpt.find_latest(run.root) == run.location("checkpoints", "step_4")
    assert ckpt.load_meta(ckpt.find_latest(run.root))["generated_samples"] == 32.0


def test_resume_finds_a_run_or_a_checkpoint_at_a_uri(tmp_path):
    cfg = _cfg(tmp_path)
    run = RunStorage.for_config(cfg)
    step2 = _save(run, 2, FakeRuntime([]), cfg)

    def resume(value, root="unused"):
        cfg.trainer.resume = value
        return ckpt.resolve_resume(cfg, root)

    assert resume("auto", run.root) == resume(run.root) == resume(step2) == step2
    storage.delete(storage.join(step2, ckpt.COMPLETE))
    assert resume("auto", run.root) is None
    with pytest.raises(ConfigError, match="no complete checkpoint under"):
        resume(run.root)
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        resume(step2)


def test_the_loop_checkpoints_at_a_uri_and_heals_from_it_on_another_node(tmp_path):
    """A learner dies at step 3: the rebuilt runtime resumes from the URI's step 2. Then a new driver
    on 'another node' (another staging folder) pulls the run and finds every step's log line."""
    cfg = _cfg(tmp_path, "trainer.max_restarts=1")
    run = RunStorage.for_config(cfg)
    run.pull()
    setup = RunSetup(cfg, lambda *_: None, run.local, "model-path", SimpleNamespace(prompts=[]), None, FakeTracker(),
                     storage=run)
    first = FakeRuntime([cohort(s) for s in range(6)], fail_train={3: RuntimeFailure("learner step did not finish")})
    second = FakeRuntime([cohort(s) for s in range(6)])
    built = iter([first, second])
    with RunFiles(run.local) as files:
        assert train_with_restarts(setup, files, lambda: next(built), LiveRuntime()) == (6, 1)
    assert ("load", "step_2") in second.calls
    assert ckpt.find_latest(run.root) == run.location("checkpoints", "step_6")
    elsewhere = RunStorage.for_config(_cfg(tmp_path, f"trainer.staging_dir={tmp_path / 'node2'}"))
    elsewhere.pull()
    steps = [json.loads(x)["step"] for x in (elsewhere.local / "trained_prompts.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5]  # pushed with the step-6 checkpoint, before its COMPLETE marker


def test_probes_a_learner_could_not_write_or_the_driver_cannot_read_are_named(tmp_path):
    probe = str(tmp_path)
    (tmp_path / "learner_0").write_text("10.0.0.1")
    (tmp_path / "learner_2").write_text("10.0.0.9")  # another node's file with the same name
    answers = [("10.0.0.1", None), ("10.0.0.2", "OSError: Access Denied"), ("10.0.0.3", None)]
    problems = probe_problems(probe, answers)
    assert problems == ["learner 1 on node 10.0.0.2 cannot write there (OSError: Access Denied)",
                        "the driver cannot read what learner 2 on node 10.0.0.3 wrote there"]
    assert probe_problems(probe, answers[:1]) == []
    line = not_shared("s3://b/runs/r", "10.0.0.1", problems)
    assert line.startswith("trainer.output_dir: s3://b/runs/r is not shared by the driver (node 10.0.0.1)")
    assert "credentials" in line and "\n" not in line
    assert "NFS" in not_shared("/srv/runs/r", "10.0.0.1", problems)


def test_a_storage_uri_is_not_a_local_output_folder():
    from ada_ray.driver.output_paths import resolve_output_dir

    with pytest.raises(ConfigError, match="is a storage URI, but this needs a local folder"):
        resolve_output_dir("s3://b/runs", cwd=Path("/"), env={})
