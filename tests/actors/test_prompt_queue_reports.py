"""PromptQueue.report_many with a lease ask riding it: the reports are applied first, then the ask is
answered as a lease call answers it (the ready items; else a wait in line up to its wait, [] at its end;
Signal.STOP once stopped); a refused report raises and leases nothing."""

import asyncio

import pytest

from ada_ray.actors.prompt_queue import PromptQueue
from ada_ray.algo.scheduler import SchedulerError
from ada_ray.algo.types import Prompt, Sample, Signal
from ada_ray.config import load_config, to_dict


def make_queue():
    cfg = to_dict(load_config("ada_seq_balance", ["trainer.batch_prompts=2", "trainer.total_steps=10",
                                                  "trainer.max_staleness=0", "algo.n=2", "algo.max_rounds=4"]))
    return PromptQueue.__ray_actor_class__([Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(8)], cfg)


def all_wrong(item):
    return [Sample(item.prompt_id, [5], [-0.1], 0.0, item.version) for _ in range(item.num_samples)]


def test_the_next_round_a_report_makes_comes_back_with_its_answer():
    async def main():
        q = make_queue()
        first = await q.lease("s0", 10)
        assert len(first) == 2 and await q.lease("s0", 10) == []  # cohort 0's two prompts, nothing else ready
        answers, items = await q.report_many("s0", [(first[0].item_id, all_wrong(first[0]))], (10, None))
        assert answers == [True]
        # all wrong: the exit rule has not fired, the prompt's next round is ready and leased in the same call
        assert [(it.prompt_id, it.round) for it in items] == [(first[0].prompt_id, 1)]
        assert (await q.stats())["leased_by"] == {"s0": 2}
        assert await q.report_many("s0", [(items[0].item_id, all_wrong(items[0]))]) == [True]  # no ask: bools only
        answers, items = await q.report_many("s0", [], (10, 1))  # max_samples 1: still at least one item
        assert answers == [] and len(items) == 1
        await q.stop()
        assert await q.report_many("s0", [], (10, None)) == ([], Signal.STOP)
        assert (await q.accounting())["items_ok"]

    asyncio.run(main())


def test_a_refused_report_raises_and_leases_nothing():
    async def main():
        q = make_queue()
        first = await q.lease("s0", 1)
        with pytest.raises(SchedulerError, match="reported 1 samples"):
            await q.report_many("s0", [(first[0].item_id, all_wrong(first[0])[:1])], (10, None))
        assert (await q.stats())["leased_by"] == {"s0": 1}  # the other prompt's item was not handed out

    asyncio.run(main())


def test_a_ridden_ask_with_nothing_ready_waits_in_line_like_a_lease_call():
    async def main():
        q = make_queue()
        a, b = await q.lease("s0", 1), await q.lease("s1", 1)
        ride = asyncio.create_task(q.report_many("s0", [], (10, None, 5.0)))
        await asyncio.sleep(0.05)
        assert not ride.done()  # nothing ready: the call waits for work, its (empty) report applied
        assert await q.report_many("s1", [(b[0].item_id, all_wrong(b[0]))]) == [True]
        answers, items = await asyncio.wait_for(ride, 2.0)
        assert answers == [] and [(it.prompt_id, it.round) for it in items] == [(b[0].prompt_id, 1)]
        assert (await q.stats())["leased_by"] == {"s0": 2}
        late = await q.report_many("s0", [], (10, None, 0.05))  # a wait that ends with nothing: []
        assert late == ([], [])
        assert len(a) == 1

    asyncio.run(main())
