"""The PromptQueue freezes its long-lived state out of the cyclic garbage collector once it holds its
prompts (at start and after a checkpoint load), raises the young generation's threshold, and the
queue still works and saves after it."""

import asyncio
import gc

import pytest

from ada_ray.actors.prompt_queue import QUEUE_GC_THRESHOLD, PromptQueue
from ada_ray.algo.types import Prompt, Sample
from ada_ray.config import load_config, to_dict


def _prompts(n):
    return [Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(n)]


def _tracked(obj) -> bool:
    """Whether a collection would walk `obj` (frozen objects are not in any generation)."""
    return any(o is obj for o in gc.get_objects())


@pytest.fixture
def unfreeze():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_queue_state_is_frozen_at_start_and_after_a_load(unfreeze):
    cfg = to_dict(load_config("ada_seq_balance", ["trainer.batch_prompts=4", "trainer.total_steps=10"]))
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    q = PromptQueue.__ray_actor_class__(_prompts(12), cfg)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == QUEUE_GC_THRESHOLD  # young collections every 50k new objects, not 700
    assert not _tracked(q.sched) and not _tracked(q.sched.estimator)

    async def one_item_reported():
        items = await q.lease("s0", 1)
        [it] = items
        samples = [Sample(it.prompt_id, [5, 2], [-0.1, -0.2], 1.0, it.version) for _ in range(it.num_samples)]
        assert await q.report_many("s0", [(it.item_id, samples)]) == [True]
        return await q.state_dict()

    state = asyncio.run(one_item_reported())  # frozen state still changes and saves as before
    gc.unfreeze()
    fresh = PromptQueue.__ray_actor_class__(_prompts(12), cfg)
    gc.unfreeze()
    new_memory = _tracked(fresh.sched.estimator)
    asyncio.run(fresh.load_state_dict(state))
    assert new_memory and not _tracked(fresh.sched.estimator)
    assert asyncio.run(fresh.accounting())["items_ok"]


def test_what_survives_a_step_is_frozen_when_its_cohort_is_handed_out(unfreeze):
    """The next cohorts' prompts in flight, made while cohort 0 ran, are out of the collector's reach once
    cohort 0 is taken (they would age into the oldest generation and be walked by every full collection)."""
    cfg = to_dict(load_config("ada_seq_balance", ["trainer.batch_prompts=2", "trainer.total_steps=10",
                                                  "trainer.max_staleness=1", "algo.n=2"]))
    q = PromptQueue.__ray_actor_class__(_prompts(12), cfg)

    async def cohort_zero():
        for _ in range(100):  # 12 prompts' worth of rounds at most; a queue that never finishes cohort 0 fails
            items = await q.lease("s0", 1)  # one at a time: cohort 1 is still in flight when 0 is done
            for it in items:
                samples = [Sample(it.prompt_id, [5, 2], [-0.1, -0.2], float(i % 2), it.version)
                           for i in range(it.num_samples)]
                assert await q.report_many("s0", [(it.item_id, samples)]) == [True]
            if q.sched.cohort_status(0) == "ready":
                gc.unfreeze()  # what the run made so far is tracked again, as it would be without the freeze
                states = list(q.sched.inflight.values())
                assert states and all(_tracked(st) for st in states)
                result = await q.wait_cohort(0, 1.0)
                return result, states
        raise AssertionError("cohort 0 never became ready")

    result, states = asyncio.run(cohort_zero())
    assert result.index == 0 and len(result.groups) == 2
    assert not any(_tracked(st) for st in states)  # cohort 1's prompts in flight: frozen with the take
