"""The garbage collector around a consumed batch (``_collector_paused``):
paused while messages are in flight, and the objects alive at a process's
1st, 2nd, 4th, ... 1024th batch frozen, so that the full collections
pyspark's daemon runs after every task do not walk them again
(docs/benchmarks.md)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from multikafka.reader_agent import _range_consumer as kafka

INTERNALS = ("multikafka.reader_agent._range_consumer",)


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if no batch had been read in this process yet."""
    gc.unfreeze()
    monkeypatch.setattr(kafka, "_batches", 0)
    yield
    gc.unfreeze()


def visible(obj: object) -> bool:
    """Whether the collector still walks ``obj`` (frozen objects it does not)."""
    return any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("fresh_process")
def test_the_first_batch_freezes_what_is_alive_and_pauses_the_collector() -> None:
    long_lived: list[object] = [object() for _ in range(10)]
    assert gc.get_freeze_count() == 0
    assert visible(long_lived)
    with kafka._collector_paused():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(long_lived)
        assert not visible(long_lived)
    assert gc.isenabled()


@pytest.mark.usefixtures("fresh_process")
def test_freezes_at_batches_numbered_by_powers_of_two_up_to_1024() -> None:
    frozen_at = []
    for n in range(1, 2100):
        made = [n]
        with kafka._collector_paused():
            if not visible(made):
                frozen_at.append(n)
    assert frozen_at == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


@pytest.mark.usefixtures("fresh_process")
def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with kafka._collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
