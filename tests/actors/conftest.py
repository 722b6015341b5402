"""Every sampler loop a test made (tests/actors/loops.py) has its lease and report threads stopped
at the end; the garbage collector's threshold is put back after each test."""

import gc

import pytest

from tests.actors.loops import LOOPS


@pytest.fixture(autouse=True)
def _stop_report_pipelines():
    yield
    while LOOPS:
        loop = LOOPS.pop()
        loop.feeder.close()
        loop.reports.abandon()


@pytest.fixture(autouse=True)
def _restore_gc_threshold():
    """A PromptQueue made in this process raises the collector's threshold (settle_heap): put it back."""
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
