"""bench scale's simulated samplers: a failure reaches the driver named, with its traceback as text (an
exception raised by the queue inside it may not unpickle in the driver)."""

import asyncio

import pytest

from ada_ray.bench.scale_sims import SimSamplerError, SimSamplers


class _FailingCall:
    async def remote(self, *args, **kwargs):
        raise KeyError((3, "p7"))  # a tuple key: what once reached the driver as an unreadable error


class _FailingQueue:
    lease = _FailingCall()
    report_many = _FailingCall()


@pytest.mark.parametrize("finish", ["together", "engine"])
def test_a_failing_queue_call_surfaces_as_a_named_error_with_its_traceback(finish):
    sims = SimSamplers.__ray_actor_class__([_FailingQueue()], 0, 2, 1.0, 8, 0, finish=finish)
    with pytest.raises(SimSamplerError) as e:
        asyncio.run(sims.run())
    msg = str(e.value)
    assert "simulated samplers sim0..sim1 failed" in msg and "KeyError: (3, 'p7')" in msg and "Traceback" in msg
