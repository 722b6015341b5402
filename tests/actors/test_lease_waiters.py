"""LeaseWaiters: waiting lease calls are served in arrival order, only while there is work, one
wakeup per call that gets work; a wait ends empty at its deadline, or with STOP."""

import asyncio

from ada_ray.actors.lease_waiters import LeaseWaiters
from ada_ray.algo.types import Signal


class FakeQueue:
    """Ready work as a list of item names; `lease` hands out up to max_items and counts its calls."""

    def __init__(self):
        self.ready: list[str] = []
        self.calls = 0

    def lease(self, sampler_id: str, max_items: int, max_samples):
        self.calls += 1
        out, self.ready = self.ready[:max_items], self.ready[max_items:]
        return out


def test_served_in_arrival_order_only_while_work_lasts():
    async def main():
        w, q = LeaseWaiters(), FakeQueue()
        calls = [asyncio.create_task(w.wait(f"s{i}", 2, None, 5.0)) for i in range(4)]
        await asyncio.sleep(0)
        assert len(w) == 4
        q.ready = ["a", "b", "c"]
        assert w.serve(q.lease) == 2  # s0 gets a, b; s1 gets c; s2 finds nothing and stays in line
        assert q.calls == 3  # not one lease attempt per waiter
        assert await calls[0] == ["a", "b"] and await calls[1] == ["c"]
        assert not calls[2].done() and not calls[3].done() and len(w) == 2
        q.ready = ["d"]
        w.serve(q.lease)
        assert await calls[2] == ["d"] and not calls[3].done()
        w.stop(Signal.STOP)
        assert await calls[3] == Signal.STOP and len(w) == 0

    asyncio.run(main())


def test_a_wait_ends_empty_at_its_deadline_and_is_skipped_later():
    async def main():
        w, q = LeaseWaiters(), FakeQueue()
        short = asyncio.create_task(w.wait("short", 1, None, 0.01))
        long = asyncio.create_task(w.wait("long", 1, None, 5.0))
        assert await short == []
        q.ready = ["x"]
        assert w.serve(q.lease) == 1
        assert await long == ["x"]  # the ended wait did not take the item
        assert q.calls == 1

    asyncio.run(main())


def test_a_cancelled_call_gets_nothing():
    async def main():
        w, q = LeaseWaiters(), FakeQueue()
        gone = asyncio.create_task(w.wait("gone", 1, None, 5.0))
        stays = asyncio.create_task(w.wait("stays", 1, None, 5.0))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        q.ready = ["x", "y"]
        w.serve(q.lease)
        assert await stays == ["x"] and q.ready == ["y"]

    asyncio.run(main())


def test_drop_ends_one_samplers_waits_and_serves_the_rest():
    async def main():
        w, q = LeaseWaiters(), FakeQueue()
        gone = asyncio.create_task(w.wait("gone", 1, None, 5.0))
        stays = asyncio.create_task(w.wait("stays", 1, None, 5.0))
        await asyncio.sleep(0)
        assert w.drop("gone", Signal.STOP) == 1 and w.drop("gone", Signal.STOP) == 0
        q.ready = ["x"]
        w.serve(q.lease)
        assert await gone == Signal.STOP and await stays == ["x"]  # the killed sampler's wait took nothing

    asyncio.run(main())


def test_a_combined_wait_is_served_when_one_of_its_asks_gets_work_and_answers_each_ask():
    async def main():
        w, q = LeaseWaiters(), FakeQueue()
        combined = asyncio.create_task(w.wait_combined([("a", 1, None), ("b", 2, None)], 5.0))
        behind = asyncio.create_task(w.wait("c", 1, None, 5.0))
        await asyncio.sleep(0)
        assert w.serve(q.lease) == 0 and q.calls == 2  # nothing ready: each ask tried once, all still wait
        q.ready = ["x", "y"]
        assert w.serve(q.lease) == 1  # the combined wait takes both: a gets x, b gets y; c finds none
        assert await combined == [["x"], ["y"]] and not behind.done()
        dropped = asyncio.create_task(w.wait_combined([("a", 1, None), ("d", 1, None)], 5.0))
        await asyncio.sleep(0)
        assert w.drop("d", Signal.STOP) == 1
        assert await dropped == [[], Signal.STOP]  # a asks again through its relay
        ends = asyncio.create_task(w.wait_combined([("e", 1, None)], 0.01))
        assert await ends == [[]]
        at_stop = asyncio.create_task(w.wait_combined([("f", 1, None), ("g", 1, None)], 5.0))
        await asyncio.sleep(0)
        w.stop(Signal.STOP)
        assert await behind == Signal.STOP
        assert await at_stop == [Signal.STOP, Signal.STOP]  # every ask of a combined wait gets the signal

    asyncio.run(main())
