"""Signal: the control values between the scheduler, the queue, the samplers and the driver stay
equal to the strings they replaced (wire- and state-compatible)."""

import json
import pickle

from ada_ray.algo.types import Signal
from tests.algo.test_scheduler import make


def test_signals_equal_and_print_as_their_old_strings():
    assert [Signal.READY, Signal.PENDING, Signal.END, Signal.STOP] == ["ready", "pending", "end", "stop"]
    assert f"{Signal.END}" == "end" and json.dumps({"s": Signal.STOP}) == '{"s": "stop"}'
    assert Signal("end") is Signal.END and pickle.loads(pickle.dumps(Signal.END)) is Signal.END
    assert Signal.TIMEOUT != [] and Signal.END != Signal.TIMEOUT


def test_cohort_status_speaks_signals():
    s = make("grpo", n_prompts=2, B=2, total_steps=1)
    assert s.cohort_status(0) is Signal.PENDING and s.cohort_status(1) is Signal.END
