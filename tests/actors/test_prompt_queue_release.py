"""PromptQueue.release_sampler: a replaced (retired) sampler's work goes out again and the old process
gets no more work - not from a lease call in flight when it was killed, not from a wait in line - while
a live sampler whose work is released (a failed weight update) keeps leasing."""

import asyncio

from ada_ray.actors.prompt_queue import PromptQueue
from ada_ray.algo.types import Prompt, Signal
from ada_ray.config import load_config, to_dict


def make_queue():
    cfg = to_dict(load_config("grpo", ["trainer.batch_prompts=4", "trainer.total_steps=10", "trainer.max_staleness=0"]))
    return PromptQueue.__ray_actor_class__([Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(8)], cfg)


def test_a_retired_sampler_gets_no_more_work_and_its_items_go_to_the_replacement():
    async def main():
        q = make_queue()
        held = await q.lease("sampler-0", 2)
        assert len(held) == 2
        got = await q.lease("sampler-0", 10, None, 5.0)
        assert len(got) == 2  # the other two items of cohort 0 (ready: no wait)
        late_wait = asyncio.create_task(q.lease("sampler-0", 10, None, 5.0))  # nothing ready: waits in line
        await asyncio.sleep(0)
        assert await q.release_sampler("sampler-0", True) == 4
        assert await late_wait == Signal.STOP  # its wait ended, it took none of the released work
        assert await q.lease("sampler-0", 10) == Signal.STOP  # a call in flight from the killed process
        again = await q.lease("sampler-0.1", 10)  # the replacement, under its new id
        assert sorted(it.prompt_id for it in again) == sorted(it.prompt_id for it in held + got)
        stats = await q.stats()
        assert stats["leased_by"] == {"sampler-0.1": 4}
        acct = await q.accounting()
        assert acct["reissued"] == 4 and acct["items_ok"]

    asyncio.run(main())


def test_a_live_sampler_released_without_retiring_keeps_leasing():
    async def main():
        q = make_queue()
        first = await q.lease("sampler-1", 1)
        assert await q.release_sampler("sampler-1") == 1
        again = await q.lease("sampler-1", 10)
        assert first[0].prompt_id in {it.prompt_id for it in again}

    asyncio.run(main())


def test_a_retired_samplers_reported_samples_are_sampled_again():
    """Its payloads died with it: the prompts holding one restart (counted), the others keep their rounds."""
    from ada_ray.algo.payloads import LocalPayloadStore, pack, remote_sample

    async def main():
        q, store = make_queue(), LocalPayloadStore()
        mine, theirs = await q.lease("sampler-0", 1), await q.lease("sampler-1", 1)

        def report(owner, it):
            batch = store.put(pack([[5]] * it.num_samples, [[-0.1]] * it.num_samples, [""] * it.num_samples), owner)
            return q.report_many(owner, [(it.item_id, [remote_sample(it.prompt_id, float(i % 2), 0, batch, i, 1)
                                                      for i in range(it.num_samples)])])

        assert await report("sampler-0", mine[0]) == [True] and await report("sampler-1", theirs[0]) == [True]
        await q.release_sampler("sampler-0", True)
        stats = await q.stats()
        assert stats["prompts_reissued"] == 1
        redo = await q.lease("sampler-0.1", 10)
        assert (mine[0].prompt_id, 0) in {(it.prompt_id, it.round) for it in redo}
        assert theirs[0].prompt_id not in {it.prompt_id for it in redo}  # its group stands
        acct = await q.accounting()
        assert acct["items_ok"] and acct["prompts_ok"] and acct["prompts_reissued"] == 1

    asyncio.run(main())
