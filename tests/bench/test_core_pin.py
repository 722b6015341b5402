"""core_pin.CorePin: the measured processes on a core of their own, the bench's others on the rest, and
everything back on every core when released."""

import os
import subprocess
import sys

import pytest

from ada_ray.bench import core_pin
from ada_ray.bench.core_pin import CorePin, CorePinError

CORES = set(os.sched_getaffinity(0))
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="pinning needs 2 or more usable cores")


def _child():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@two_cores
def test_measured_process_gets_a_core_of_its_own_and_everything_is_put_back():
    measured, other = _child(), _child()  # both descendants of this process; one is the measured
    try:
        pin = CorePin([measured.pid])
        first = min(CORES)
        assert os.sched_getaffinity(measured.pid) == {first}
        assert os.sched_getaffinity(other.pid) == CORES - {first}  # a descendant: the bench's other processes
        assert os.sched_getaffinity(0) == CORES - {first}  # and this process itself
        assert pin.describe() == {"queue_cores": [first], "other_cores": sorted(CORES - {first}),
                                  "pinned_processes": 3}
        late = _child()  # started while pinned: inherits this process's cores, and is put back too
        try:
            assert os.sched_getaffinity(late.pid) == CORES - {first}
            pin.release()
            for pid in (0, measured.pid, other.pid, late.pid):
                assert os.sched_getaffinity(pid) == CORES
        finally:
            late.kill()
    finally:
        os.sched_setaffinity(0, CORES)
        measured.kill()
        other.kill()


@two_cores
def test_a_process_that_is_gone_is_skipped():
    gone = _child()
    gone.kill()
    gone.wait()
    pin = CorePin([gone.pid])
    try:
        assert os.sched_getaffinity(0) == CORES - {min(CORES)}
    finally:
        pin.release()
    assert os.sched_getaffinity(0) == CORES


def test_one_core_is_refused_with_the_parameter_named(monkeypatch):
    monkeypatch.setattr(core_pin.os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(CorePinError, match=r"queue_cores=1 needs 2 or more usable CPU cores, this process has 1"):
        CorePin([os.getpid()])


def test_queue_cores_values_are_checked():
    from ada_ray.bench.scale import _flag

    assert [_flag("queue_cores", v) for v in ("0", "1", "on", "off")] == [False, True, True, False]
    with pytest.raises(ValueError, match=r"bench scale queue_cores: expected 0 or 1 .* got '2'"):
        _flag("queue_cores", "2")
