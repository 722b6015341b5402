"""Every sampler loop a test made (tests/actors/loops.py) has its lease and report threads stopped
at the end."""

import pytest

from tests.actors.loops import LOOPS


@pytest.fixture(autouse=True)
def _stop_report_pipelines():
    yield
    while LOOPS:
        loop = LOOPS.pop()
        loop.feeder.close()
        loop.reports.abandon()
