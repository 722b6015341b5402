"""bench scale's arguments: a bad one is refused before any cluster or data is made."""

import pytest

from ada_ray.bench import scale


def test_an_unknown_probe_route_is_refused_up_front(tmp_path):
    with pytest.raises(ValueError, match="bench scale probe: expected relay or queue, got 'shard'"):
        scale.run(out_dir=tmp_path, probe="shard")
    assert not (tmp_path / "scale_data").exists()  # nothing was made


def test_a_bad_queue_cores_flag_is_refused_up_front(tmp_path):
    with pytest.raises(ValueError, match="queue_cores"):
        scale.run(out_dir=tmp_path, queue_cores="2")
