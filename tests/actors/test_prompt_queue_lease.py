"""PromptQueue lease answers travel as columns (types.WorkBatch) on every path - a lease answered at
once, a relay's combined asks, a long poll served when work appears - and an ask with no work gets []."""

import asyncio
import pickle

from ada_ray.actors.prompt_queue import PromptQueue
from ada_ray.algo.types import Prompt, Sample, WorkBatch
from ada_ray.config import load_config, to_dict


def _queue():
    cfg = to_dict(load_config("grpo", ["trainer.batch_prompts=2", "trainer.total_steps=10", "trainer.max_staleness=0"]))
    return PromptQueue.__ray_actor_class__([Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(8)], cfg)


def _as_columns(answer) -> bool:
    return type(answer) is WorkBatch and b"WorkItem" not in pickle.dumps(answer)


def test_every_lease_path_answers_with_columns_and_no_work_is_an_empty_list():
    async def main():
        q = _queue()
        first = await q.lease("s0", 1)
        assert _as_columns(first) and len(first) == 1
        second, none = await q.lease_batch([("s1", 5, None), ("s2", 5, None)])
        assert _as_columns(second) and len(second) == 1 and none == []  # cohort 0 holds 2 prompts
        waiting = asyncio.create_task(q.lease("s2", 5, None, 5.0))  # nothing ready: waits in line
        await asyncio.sleep(0)
        items = list(first) + list(second)
        reports = [(it.item_id, [Sample(it.prompt_id, [5, 2], [-0.1, -0.2], float(j % 2), it.version)
                                 for j in range(it.num_samples)]) for it in items]
        assert await q.report_many("s0", reports) == [True, True]
        assert await q.cohort_ready(0, 5.0) == "ready"
        await q.wait_cohort(0, 5.0)
        await q.set_version(1)  # cohort 1 opens: the waiter is served
        served = await asyncio.wait_for(waiting, 5.0)
        assert _as_columns(served) and {it.cohort for it in served} == {1}
        assert pickle.loads(pickle.dumps(served)) == list(served)

    asyncio.run(main())
