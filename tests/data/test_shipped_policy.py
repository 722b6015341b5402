"""The embedded base policy that ships with the package: chosen for the default recipe, checksummed."""

import shutil

import pytest

from ada_ray.config import load_config
from ada_ray.data import shipped_policy as sp
from ada_ray.data.warmstart import embedded_key, ensure_embedded_policy, recipe


def test_the_default_config_loads_the_shipped_policy():
    cfg = load_config()
    manifest = sp.verify()
    assert manifest["key"] == embedded_key(cfg) and manifest["recipe"] == recipe(cfg)
    assert ensure_embedded_policy(cfg) == sp.SHIPPED_DIR
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["sha256"])


def test_another_recipe_is_not_served_the_shipped_policy(tmp_path):
    cfg = load_config(None, ["model.warmstart.stop_at_step=10", f"model.cache_dir={tmp_path}"])
    assert embedded_key(cfg) != sp.read_manifest()["key"]
    assert sp.shipped_for(embedded_key(cfg)) is None


def test_a_changed_file_is_refused_with_its_name(tmp_path):
    copy = tmp_path / "policy"
    shutil.copytree(sp.SHIPPED_DIR, copy)
    key = sp.read_manifest(copy)["key"]
    assert sp.shipped_for(key, copy) == copy
    (copy / "tokenizer.json").write_text((copy / "tokenizer.json").read_text() + " ")
    with pytest.raises(sp.ShippedPolicyError, match="tokenizer.json has SHA-256"):
        sp.shipped_for(key, copy)
    (copy / "config.json").unlink()
    with pytest.raises(sp.ShippedPolicyError, match="config.json is missing"):
        sp.verify(copy)


def test_write_shipped_records_every_file(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    (built / "a.json").write_text("{}")
    (built / "w.safetensors").write_bytes(b"xyz")
    out = sp.write_shipped(built, "k1", {"r": 1}, {"steps": 1}, tmp_path / "shipped")
    m = sp.verify(out)
    assert m["key"] == "k1" and set(m["sha256"]) == {"a.json", "w.safetensors"}
    assert m["sha256"]["w.safetensors"] == sp.sha256(built / "w.safetensors")


def test_stop_at_step_ends_the_sft_early_on_the_same_schedule(tmp_path):
    import json

    from ada_ray.data.warmstart import _lr_at, train_warmstart

    cfg = load_config(None, ["model.warmstart.steps=40", "model.warmstart.stop_at_step=3", "model.warmstart.batch_size=4",
                             "model.warmstart.warmup_steps=2", "model.embedded.hidden_size=16",
                             "model.embedded.intermediate_size=32", "model.embedded.num_heads=2",
                             "model.embedded.num_kv_heads=1", "model.embedded.num_layers=1"])
    report = train_warmstart(cfg, tmp_path / "p")
    assert report["steps"] == 3 and json.loads((tmp_path / "p" / "warmstart.json").read_text())["steps"] == 3
    # the lr still follows the 40-step schedule: step 2 is already past warm-up, far from the cosine's end
    assert _lr_at(2, cfg.model) > 0.9 * cfg.model.warmstart.lr
