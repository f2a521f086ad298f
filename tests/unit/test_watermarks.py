"""The watermarks planning shares between queries
(:class:`multikafka.coordinator.planning.watermarks.Watermarks`), over the
fakes: how often a cluster is asked, and that a cached watermark never
answers a query differently from a fresh one where that matters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from multikafka.coordinator.clusters.discovery import ClusterClient
from multikafka.coordinator.planning import watermarks as watermarks_module
from multikafka.coordinator.planning.watermarks import Watermarks
from multikafka.core._offsets import EMPTY, SplitOffsets, as_offsets
from multikafka.core.exceptions import UnavailableError
from multikafka.devstack.stack import stream_doc
from tests.fakes import FakeCluster, Parts
from tests.helpers import eventually_async

INTERNALS = (
    "multikafka.coordinator.clusters.discovery",
    "multikafka.coordinator.planning.watermarks",
    "multikafka.core._offsets",
)


A = "h:1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def cluster(parts: Parts) -> FakeCluster:
    cluster = parts.kafka.cluster(A)
    for p in (0, 1):
        cluster.add_records("t", p, [1000] * 100)
    await parts.put(stream_doc("s", {"a": (A, ["t"])}))
    return cluster


async def _client(parts: Parts) -> ClusterClient:
    cc = parts.discovery.require("s", "a")
    if not cc.discovered:
        await parts.discovery.discover(cc)
    return cc


async def _get(
    parts: Parts,
    marks: Watermarks,
    start: SplitOffsets = EMPTY,
    cap: SplitOffsets | None = None,
    budget: int | None = None,
) -> dict[str, int]:
    cc = await _client(parts)
    ask, _ = cc.split_table()
    latest, stop, _ = await marks.get(
        parts.store.get("s"), cc, ask, start=start, cap=cap, budget=budget
    )
    assert stop is None
    return latest.to_dict()


async def test_queries_within_the_age_share_one_request(parts: Parts, cluster: FakeCluster) -> None:
    clock = Clock()
    marks = Watermarks(parts.discovery, max_age_s=1.0, clock=clock)
    assert await _get(parts, marks) == {"a/t/0": 100, "a/t/1": 100}
    cluster.add_records("t", 0, [2000] * 5)
    clock.now += 0.4
    # Younger than half the age: served as cached, and no request in the background.
    assert [await _get(parts, marks) for _ in range(10)] == [{"a/t/0": 100, "a/t/1": 100}] * 10
    assert (marks.asked, marks.served) == (1, 10)

    clock.now += 0.7  # older than the age: asked again, the query waits for it
    assert await _get(parts, marks) == {"a/t/0": 105, "a/t/1": 100}
    assert marks.asked == 2
    await marks.close()


async def test_past_half_the_age_a_query_refreshes_in_the_background(
    parts: Parts, cluster: FakeCluster
) -> None:
    clock = Clock()
    marks = Watermarks(parts.discovery, max_age_s=1.0, clock=clock)
    await _get(parts, marks)
    cluster.add_records("t", 1, [2000] * 3)
    clock.now += 0.6
    assert await _get(parts, marks) == {"a/t/0": 100, "a/t/1": 100}  # no wait

    # The request it started in the background ends; the next query has its answer.
    await eventually_async(lambda: marks.asked == 2 and not marks._pending, timeout_s=5)
    assert await _get(parts, marks) == {"a/t/0": 100, "a/t/1": 103}
    assert marks.asked == 2
    await marks.close()


async def test_a_query_ahead_of_the_cache_gets_a_fresh_answer(
    parts: Parts, cluster: FakeCluster
) -> None:
    """A query at a position past the cached watermark (it planned from a
    fresher one, or ResolveOffsets gave it) would see its offsets go
    backwards (data loss): it is asked fresh instead."""
    marks = Watermarks(parts.discovery, max_age_s=60.0, clock=Clock())
    await _get(parts, marks)
    cluster.add_records("t", 0, [2000] * 20)
    ahead = as_offsets({"a/t/0": 110, "a/t/1": 100})
    assert await _get(parts, marks, ahead) == {"a/t/0": 120, "a/t/1": 100}
    assert marks.asked == 2
    # At or behind the cache: served from it.
    assert await _get(parts, marks, as_offsets({"a/t/0": 120, "a/t/1": 7})) == {
        "a/t/0": 120,
        "a/t/1": 100,
    }
    assert marks.asked == 2
    await marks.close()


async def test_an_available_now_target_past_the_cache_is_asked_fresh(
    parts: Parts, cluster: FakeCluster
) -> None:
    """A run's target comes from an exact lookup: a stale watermark below it
    would end the run before it, so the cluster is asked."""
    marks = Watermarks(parts.discovery, max_age_s=60.0, clock=Clock())
    await _get(parts, marks)
    cluster.add_records("t", 1, [2000] * 4)
    target = as_offsets({"a/t/0": 100, "a/t/1": 104})
    assert await _get(parts, marks, cap=target) == {"a/t/0": 100, "a/t/1": 104}
    assert marks.asked == 2
    await marks.close()


async def test_concurrent_queries_wait_for_one_request(parts: Parts, cluster: FakeCluster) -> None:
    marks = Watermarks(parts.discovery, max_age_s=60.0, clock=Clock())
    await _client(parts)
    got = await asyncio.gather(*(_get(parts, marks) for _ in range(20)))
    assert got == [{"a/t/0": 100, "a/t/1": 100}] * 20
    assert marks.asked == 1
    await marks.close()


async def test_queries_waiting_on_a_slow_answer_share_it(
    parts: Parts, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer slower than the age still serves every query that came
    within the age after it was asked; later ones share one more request.
    Before, each waiting query asked again after a slow answer: a herd that
    slowed the cluster further (600 queries collapsed to 108 triggers/s)."""
    clock = Clock()
    marks = Watermarks(parts.discovery, max_age_s=0.1, clock=clock)
    await _client(parts)
    gate = asyncio.Event()
    asked = watermarks_module.lookup

    async def slow(*args: Any, **kwargs: Any) -> SplitOffsets:
        await gate.wait()
        return await asked(*args, **kwargs)

    monkeypatch.setattr(watermarks_module, "lookup", slow)
    first = asyncio.create_task(_get(parts, marks))
    await eventually_async(lambda: marks.asked == 1)
    clock.now += 0.05  # within the age of the request on its way
    within = [asyncio.create_task(_get(parts, marks)) for _ in range(20)]
    await asyncio.sleep(0)  # each is waiting for the request
    clock.now += 0.1  # past the age of it
    later = [asyncio.create_task(_get(parts, marks)) for _ in range(20)]
    await asyncio.sleep(0)
    clock.now += 1.0  # the cluster answers a second after it was asked
    gate.set()
    got = await asyncio.gather(first, *within, *later)
    assert got == [{"a/t/0": 100, "a/t/1": 100}] * 41
    assert marks.asked == 2  # the first request, and one for the later queries
    await marks.close()


async def test_a_cluster_that_does_not_answer_is_not_served_from_the_cache(
    parts: Parts, cluster: FakeCluster
) -> None:
    clock = Clock()
    marks = Watermarks(parts.discovery, max_age_s=1.0, clock=clock)
    await _get(parts, marks)
    cluster.down = True
    clock.now += 2
    with pytest.raises(UnavailableError):
        await _get(parts, marks)
    cluster.down = False
    clock.now -= 2  # even within the age of the old answer: it was dropped
    parts.discovery.require("s", "a").health.retry_at = 0
    assert await _get(parts, marks) == {"a/t/0": 100, "a/t/1": 100}
    assert marks.asked == 3
    await marks.close()


async def test_age_zero_asks_on_every_call(parts: Parts, cluster: FakeCluster) -> None:
    marks = Watermarks(parts.discovery, max_age_s=0.0)
    for _ in range(3):
        await _get(parts, marks)
    assert marks.asked == 3
    await marks.close()


async def test_planning_many_queries_asks_the_cluster_once(
    parts: Parts, cluster: FakeCluster
) -> None:
    """Through the Planner's use case: a hundred queries' LatestOffsets
    within the age cost the cluster one request, and each still plans its
    own batch from its own start."""
    view = parts.store.get("s")
    start = as_offsets({"a/t/0": 0, "a/t/1": 0})
    await parts.batches.latest(
        view, "q0", start, max_records=None, cap=None, fail_on_data_loss=True
    )
    before = cluster.calls
    for i in range(100):
        plan = await parts.batches.latest(
            view,
            f"q{i}",
            as_offsets({"a/t/0": i, "a/t/1": 0}),
            max_records=None,
            cap=None,
            fail_on_data_loss=True,
        )
        assert plan.end == {"a/t/0": 100, "a/t/1": 100}
    assert cluster.calls - before <= 1


async def test_a_query_its_budget_holds_back_is_served_older_values(
    parts: Parts, cluster: FakeCluster
) -> None:
    """A query reading at most 50 records a batch, 150 behind in the cached
    value, reads none of the newest records this batch anyway: a value
    older than the age serves it (renewed in the background); one that does
    not fill its budget, or is older than BEHIND_MAX_AGE_S, does not."""
    clock = Clock()
    marks = Watermarks(parts.discovery, max_age_s=0.1, clock=clock)
    start = as_offsets({"a/t/0": 20, "a/t/1": 30})  # 80 + 70 = 150 behind
    assert await _get(parts, marks, start, budget=50) == {"a/t/0": 100, "a/t/1": 100}
    cluster.add_records("t", 0, [2000] * 5)
    clock.now += 2.0
    assert await _get(parts, marks, start, budget=150) == {"a/t/0": 100, "a/t/1": 100}
    assert marks.served == 1
    await eventually_async(lambda: marks.asked == 2 and not marks._pending, timeout_s=5)

    clock.now += 2.0  # the renewed value (105 on a/t/0) is 2 s old: 155 behind
    assert await _get(parts, marks, start, budget=156) == {"a/t/0": 105, "a/t/1": 100}
    assert marks.asked == 3  # not filled: asked fresh
    clock.now += 6.0
    assert await _get(parts, marks, start, budget=1) == {"a/t/0": 105, "a/t/1": 100}
    assert marks.asked == 4  # older than BEHIND_MAX_AGE_S: asked fresh
    clock.now += 2.0
    assert await _get(parts, marks, start) == {"a/t/0": 105, "a/t/1": 100}
    assert marks.asked == 5  # no budget: the age holds
    await marks.close()

    zero = Watermarks(parts.discovery, max_age_s=0.0)
    for _ in range(2):
        await _get(parts, zero, start, budget=1)
    assert zero.asked == 2  # an age of 0 asks on every call, budget or not
    await zero.close()


async def test_readers_of_committed_records_get_last_stable_offsets(
    parts: Parts, cluster: FakeCluster
) -> None:
    """A transaction open at offset 60 of t/0. A query reading committed
    records is given the last stable offsets, a query reading everything the
    high watermarks, from values of their own. One whose position is past a
    last stable offset also gets the high watermarks (one more request, once):
    its split waits there, no data is lost."""
    cluster.stable[("t", 0)] = 60
    marks = Watermarks(parts.discovery, max_age_s=60.0, clock=Clock())
    cc = await _client(parts)
    ask, _ = cc.split_table()
    view = parts.store.get("s")
    got = await marks.get(view, cc, ask, start=EMPTY, committed=True)
    assert got.latest.to_dict() == {"a/t/0": 60, "a/t/1": 100}
    assert got.high.to_dict() == got.latest.to_dict()  # no position past them: not asked
    assert marks.asked == 1
    assert await _get(parts, marks) == {"a/t/0": 100, "a/t/1": 100}
    assert marks.asked == 2
    inside = as_offsets({"a/t/0": 80, "a/t/1": 100})
    got = await marks.get(view, cc, ask, start=inside, committed=True)
    assert got.latest.to_dict() == {"a/t/0": 60, "a/t/1": 100}
    assert got.high.to_dict() == {"a/t/0": 100, "a/t/1": 100}
    assert marks.asked == 3
    again = await marks.get(view, cc, ask, start=inside, committed=True)
    assert again.high.to_dict() == {"a/t/0": 100, "a/t/1": 100}
    assert marks.asked == 3  # served from the value that has them
    await marks.close()
