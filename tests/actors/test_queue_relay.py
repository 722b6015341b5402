"""QueueRelay: a node's samplers' calls reach the queue combined (group commit), with the answers a
sampler would get from the queue itself: its own items (leases stay the sampler's), a long poll that
ends when work appears or at its wait, STOP for a retired sampler, a refused report raised in that
sampler's call only, and a named error when the queue does not answer."""

import asyncio
from types import SimpleNamespace

import pytest

from ada_ray.actors.prompt_queue import PromptQueue
from ada_ray.actors.queue_relay import Relay, RelayError
from ada_ray.algo.types import Prompt, Sample, Signal
from ada_ray.config import load_config, to_dict


def make_queue(max_staleness: int = 0):
    cfg = to_dict(load_config("grpo", ["trainer.batch_prompts=4", "trainer.total_steps=10",
                                       f"trainer.max_staleness={max_staleness}"]))
    return PromptQueue.__ray_actor_class__([Prompt(f"p{i}", f"q{i}", (1, 2, 3), str(i), "2x1") for i in range(8)], cfg)


class Handle:
    """An actor handle over an object in this process: `handle.m.remote(*a)` awaits `obj.m(*a)` and
    counts the calls by method."""

    def __init__(self, obj):
        self.obj = obj
        self.calls: dict[str, list] = {}

    def __getattr__(self, name):
        def remote(*args):
            self.calls.setdefault(name, []).append(args)
            return getattr(self.obj, name)(*args)

        return SimpleNamespace(remote=remote)


def samples(item, reward=1.0):
    return [Sample(item.prompt_id, [5], [-0.1], reward, item.version) for _ in range(item.num_samples)]


def test_asks_that_arrive_together_go_in_one_call_and_the_items_are_each_samplers_own():
    async def main():
        q = make_queue()
        h = Handle(q)
        relay = Relay(h)
        got = await asyncio.gather(*(relay.lease(f"s{i}", 1) for i in range(3)))
        assert [len(g) for g in got] == [1, 1, 1]
        assert len(h.calls["lease_batch"]) == 1 and len(h.calls["lease_batch"][0][0]) == 3  # one call, three asks
        assert len({g[0].prompt_id for g in got}) == 3
        assert (await q.stats())["leased_by"] == {"s0": 1, "s1": 1, "s2": 1}  # a dead s1 releases its own
        assert await q.release_sampler("s1", True) == 1
        assert len(await relay.lease("s3", 10)) == 2  # s1's item and the cohort's fourth
        acct = await q.accounting()
        assert acct["items_ok"] and acct["reissued"] == 1

    asyncio.run(main())


def test_reports_that_arrive_together_go_in_one_call():
    async def main():
        q = make_queue()
        h = Handle(q)
        relay = Relay(h)
        items = await relay.lease("s0", 4)
        out = await asyncio.gather(*(relay.report_many("s0", [(it.item_id, samples(it))]) for it in items))
        assert out == [[True]] * 4
        assert len(h.calls["report_batch"]) == 1
        assert (await relay.stats())["report_calls"] == 1
        assert (await q.accounting())["completed"] == 4

    asyncio.run(main())


def test_a_refused_report_fails_only_its_samplers_call():
    async def main():
        q = make_queue()
        relay = Relay(Handle(q))
        a, b = await relay.lease("a", 1), await relay.lease("b", 1)
        bad = relay.report_many("a", [(a[0].item_id, samples(a[0])[:1])])  # too few samples: the scheduler refuses
        good = relay.report_many("b", [(b[0].item_id, samples(b[0]))])
        out = await asyncio.gather(bad, good, return_exceptions=True)
        assert "reported 1 samples" in str(out[0]) and out[1] == [True]

    asyncio.run(main())


def test_a_long_poll_is_answered_when_work_appears_and_a_fresh_ask_is_not_held_up_by_it():
    async def main():
        q = make_queue(max_staleness=0)
        h = Handle(q)
        relay = Relay(h)
        items = await relay.lease("s0", 4)  # all of cohort 0; cohort 1 opens only at version 1
        waiting = asyncio.create_task(relay.lease("s1", 2, None, 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done() and (await relay.stats())["poll_calls"] == 1
        fresh = await asyncio.wait_for(relay.lease("s2", 2), 1.0)  # a plain ask: answered at once, not after the poll
        assert fresh == []
        await relay.report_many("s0", [(it.item_id, samples(it)) for it in items])
        await q.set_version(1)  # cohort 1 opens: the waiting ask gets its items
        got = await asyncio.wait_for(waiting, 1.0)
        assert len(got) == 2 and all(it.cohort == 1 for it in got)

    asyncio.run(main())


def test_an_ask_gets_empty_at_the_end_of_its_wait_and_stop_once_its_sampler_is_retired():
    async def main():
        q = make_queue()
        relay = Relay(Handle(q))
        await relay.lease("s0", 4)
        assert await asyncio.wait_for(relay.lease("s1", 1, None, 0.05), 1.0) == []
        retired = asyncio.create_task(relay.lease("s1", 1, None, 5.0))
        other = asyncio.create_task(relay.lease("s2", 1, None, 0.3))
        await asyncio.sleep(0.05)
        await q.release_sampler("s1", True)  # s0 lives: its items stay leased, none ready
        assert await asyncio.wait_for(retired, 1.0) == Signal.STOP
        assert await asyncio.wait_for(other, 1.0) == []  # asked again after the combined wait ended, then timed out

    asyncio.run(main())


def test_a_queue_that_does_not_answer_fails_the_carried_calls_with_a_named_error():
    class Silent:
        async def lease_batch(self, asks, wait_s):
            await asyncio.sleep(60)

        async def report_batch(self, batches):
            await asyncio.sleep(60)

    async def main():
        relay = Relay(Handle(Silent()), name="node-a")
        relay.answer_timeout_s = 0.05
        with pytest.raises(RelayError, match="queue relay node-a: the queue did not answer a combined lease"):
            await relay.lease("s0", 1)
        with pytest.raises(RelayError, match="combined report"):
            await relay.report_many("s0", [])

    asyncio.run(main())


def test_relays_are_used_when_asked_and_by_default_from_64_samplers():
    from ada_ray.actors.queue_relay import relay_enabled

    def cfg(mode, n):
        return SimpleNamespace(queue_relay=mode, num_samplers=n)

    assert [relay_enabled(cfg("auto", n)) for n in (1, 63, 64, 256)] == [False, False, True, True]
    assert relay_enabled(cfg("per_node", 1)) and not relay_enabled(cfg("direct", 256))


def test_asks_ride_reports_only_on_direct_calls_to_the_queue():
    from ada_ray.actors.queue_relay import asks_ride_reports

    def cfg(mode, n, ride=True):
        return SimpleNamespace(queue_relay=mode, num_samplers=n, leases_ride_reports=ride)

    assert [asks_ride_reports(cfg("auto", n)) for n in (1, 63, 64)] == [True, True, False]
    assert asks_ride_reports(cfg("direct", 256)) and not asks_ride_reports(cfg("per_node", 1))
    assert not asks_ride_reports(cfg("direct", 1, ride=False))


def test_asks_through_a_relay_get_stop_once_the_queue_stopped():
    async def main():
        q = make_queue()
        relay = Relay(Handle(q))
        await q.stop()
        assert await asyncio.gather(relay.lease("s0", 1), relay.lease("s1", 1, None, 5.0)) == [Signal.STOP] * 2

    asyncio.run(main())


def test_an_ask_riding_a_report_is_answered_after_the_report_from_a_combined_lease():
    async def main():
        q = make_queue()
        h = Handle(q)
        relay = Relay(h)
        got = await relay.lease("s0", 1)
        answers, items = await relay.report_many("s0", [(got[0].item_id, samples(got[0]))], (10, None))
        assert answers == [True] and len(items) == 3  # the cohort's other three prompts
        assert len(h.calls["report_batch"]) == 1 and len(h.calls["lease_batch"]) == 2
        assert h.calls["lease_batch"][1] == ([("s0", 10, None)], 0.0)  # the ridden ask: answered at once
        assert await relay.report_many("s0", [(it.item_id, samples(it)) for it in items]) == [True] * 3
        await q.stop()
        assert await relay.report_many("s0", [], (10, None)) == ([], Signal.STOP)

    asyncio.run(main())
