"""Which backend the weight bus uses: NCCL only where both sides have their own GPUs."""

import pytest

from ada_ray.sync.process_group import bus_backend


@pytest.mark.parametrize("requested, sampler_gpu, learner_gpu, colocated, expected", [
    ("auto", False, False, False, "gloo"),  # CPU machine
    ("auto", True, True, False, "nccl"),  # GPUs on both sides
    ("auto", True, False, False, "gloo"),  # learner on CPU
    ("auto", True, True, True, "gloo"),  # sampler and learner share a GPU: no two NCCL ranks on it
    ("gloo", True, True, False, "gloo"),
    ("nccl", True, True, False, "nccl"),
])
def test_bus_backend(requested, sampler_gpu, learner_gpu, colocated, expected):
    assert bus_backend(requested, sampler_gpu, learner_gpu, colocated) == expected
