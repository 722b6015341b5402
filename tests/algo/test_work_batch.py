"""A lease answer as columns (types.WorkBatch): every WorkItem field travels, a hop that does not read it
builds nothing and pickles no object an item, and it reads as the list of items it was made from."""

import dataclasses
import pickle

from ada_ray.algo.types import Signal, WorkBatch, WorkItem


def _items(n: int) -> list[WorkItem]:
    return [WorkItem(10 + i, f"p{i}", tuple(range(i + 1)), f"a{i}", 4 + i, 2, i % 3, 1000 + i, 5) for i in range(n)]


def test_a_batch_round_trips_every_field_and_reads_as_its_items():
    items = _items(3)
    back = pickle.loads(pickle.dumps(WorkBatch.of(items)))
    assert len(back) == 3 and back == items and list(back) == items and back[1] == items[1] and back[-1] == items[2]
    assert [dataclasses.asdict(x) for x in back] == [dataclasses.asdict(x) for x in items]
    assert back[0] is back[0]  # built once
    assert sum(it.num_samples for it in back) == 15
    assert back != Signal.STOP and not (back == Signal.STOP)  # the lease answer's sentinel is told apart


def test_a_hop_that_does_not_read_it_builds_nothing_and_no_item_is_pickled_as_an_object():
    wire = pickle.dumps(WorkBatch.of(_items(4)))
    assert b"WorkItem" not in wire  # columns, not an object an item
    hop = pickle.loads(wire)
    again = pickle.dumps(hop)  # a relay passing it on
    assert hop._items is None and again == wire
    assert pickle.loads(again) == _items(4)


def test_an_empty_batch_is_falsy_and_equals_no_work():
    b = pickle.loads(pickle.dumps(WorkBatch.of([])))
    assert not b and len(b) == 0 and b == [] and list(b) == []


def test_batches_concatenate_as_lists():
    a, b = WorkBatch.of(_items(2)), WorkBatch.of(_items(3)[2:])
    assert a + b == _items(3) and [] + a == _items(2) and a + [] == _items(2)


def test_the_quick_constructor_makes_what_the_dataclass_makes_with_every_field():
    import inspect

    args = (7, "p", (1, 2), "a", 8, 3, 1, 99, 4)
    assert WorkItem.make(*args) == WorkItem(*args) and WorkItem.make(*args).but(version=5) == WorkItem(*args[:-1], 5)
    assert list(inspect.signature(WorkItem.make).parameters) == [f.name for f in dataclasses.fields(WorkItem)]
