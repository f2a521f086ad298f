"""Where a query left a cluster removed from its stream, over the fakes:

* :class:`multikafka.coordinator.state.queries.QueryStore`: remembering (lowered to an
  abandoned position, an agent's late report included), forgetting once the
  splits are held again or the window has passed, surviving a reload from
  etcd (a new leader);
* :meth:`multikafka.coordinator.planning.entry.EntryOffsets.resume`: the same offsets when the
  cluster is added back, data loss when the log start passed them, and an
  unreachable cluster's splits waiting instead of taking the starting
  position.
"""

from __future__ import annotations

import pytest

from multikafka.coordinator.state.queries import QueryStore, RemovedCluster
from multikafka.core._offsets import as_offsets
from multikafka.core.exceptions import DataLossError
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.state.queries",
    "multikafka.core._offsets",
)


A, B = "h:1", "h:2"
DAY_MS = 86_400_000


async def test_remembers_where_the_query_left_a_removed_cluster(parts: Parts) -> None:
    q = parts.queries
    await q.commit("q", "s", {"a/t/0": 5, "b/t/0": 100, "b/t/1": 40})
    await q.abandon("q", "s", "b/t/0", 60)  # a range [60, 100) on b was given up

    await q.remember_removed("q", "s", {"b/t/0": 100, "b/t/1": 40}, now_ms=1_000)

    progress = q.get("q")
    assert progress is not None
    assert progress.removed == {"b": RemovedCluster(1_000, as_offsets({"b/t/0": 60, "b/t/1": 40}))}
    assert progress.resumable(DAY_MS, now_ms=2_000) == {"b": {"b/t/0": 60, "b/t/1": 40}}
    assert progress.resumable(1_000, now_ms=2_000) == {}  # the window has passed
    assert progress.resumable(0, now_ms=1_000) == {}  # 0: forgotten at once


async def test_a_late_abandonment_lowers_the_remembered_offset(parts: Parts) -> None:
    q = parts.queries
    await q.commit("q", "s", {"b/t/0": 100})
    await q.remember_removed("q", "s", {"b/t/0": 100}, now_ms=1_000)
    # The agent's report of a range it gave up arrives after planning retired b.
    await q.abandon("q", "s", "b/t/0", 70)
    progress = q.get("q")
    assert progress is not None
    assert progress.removed["b"].offsets == {"b/t/0": 70}
    await q.abandon("q", "s", "b/t/0", 90)  # a later offset changes nothing
    assert progress.removed["b"].offsets == {"b/t/0": 70}


async def test_planning_again_from_the_same_start_keeps_the_removal_time(parts: Parts) -> None:
    q = parts.queries
    await q.remember_removed("q", "s", {"b/t/0": 100}, now_ms=1_000)
    await q.remember_removed("q", "s", {"b/t/0": 100}, now_ms=5_000)
    progress = q.get("q")
    assert progress is not None
    assert progress.removed["b"].removed_ms == 1_000
    # Removed again after it was back and read further: a new removal.
    await q.remember_removed("q", "s", {"b/t/0": 300}, now_ms=9_000)
    assert progress.removed["b"] == RemovedCluster(9_000, as_offsets({"b/t/0": 300}))


async def test_forgotten_once_held_again_while_the_cluster_is_back(parts: Parts) -> None:
    q = parts.queries
    await q.remember_removed("q", "s", {"b/t/0": 100, "b/t/1": 40}, now_ms=1_000)
    start = as_offsets({"a/t/0": 5, "b/t/0": 100})
    # While b is still out of the stream, nothing is forgotten.
    await q.forget_held("q", start, {"a"})
    progress = q.get("q")
    assert progress is not None
    assert set(progress.removed["b"].offsets) == {"b/t/0", "b/t/1"}
    # Back: the split the query holds again is forgotten, the other kept.
    await q.forget_held("q", start, {"a", "b"})
    assert progress.removed["b"].offsets == {"b/t/1": 40}
    await q.forget_held("q", as_offsets({"b/t/0": 100, "b/t/1": 41}), {"a", "b"})
    assert progress.removed == {}


async def test_commit_forgets_what_expired(parts: Parts) -> None:
    q = parts.queries
    await q.remember_removed("q", "s", {"b/t/0": 100}, now_ms=1)  # 1970: long ago
    await q.commit("q", "s", {"a/t/0": 5})  # no window given: kept
    progress = q.get("q")
    assert progress is not None
    assert "b" in progress.removed
    await q.commit("q", "s", {"a/t/0": 6}, retention_ms=DAY_MS)
    assert progress.removed == {}


async def test_remembered_positions_survive_a_new_leader(parts: Parts) -> None:
    await parts.queries.commit("q", "s", {"a/t/0": 5, "b/t/0": 100})
    await parts.queries.remember_removed("q", "s", {"b/t/0": 100}, now_ms=1_000)
    reloaded = QueryStore(parts.etcd, "/t")  # what the next leader loads
    await reloaded.load()
    progress = reloaded.get("q")
    assert progress is not None
    assert progress.removed == {"b": RemovedCluster(1_000, as_offsets({"b/t/0": 100}))}
    assert progress.offsets == {"a/t/0": 5, "b/t/0": 100}


async def _stream_with_b(parts: Parts, log_start: int = 0) -> None:
    for bootstrap in (A, B):
        cluster = parts.kafka.cluster(bootstrap)
        for p in (0, 1):
            cluster.earliest[("t", p)] = log_start
            cluster.add_records("t", p, [1000 * (i + 1) for i in range(200)])
    await parts.put(stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}))


async def test_resume_enters_at_the_offsets_the_query_left(parts: Parts) -> None:
    await _stream_with_b(parts)
    view = parts.store.get("s")
    left = {"b": as_offsets({"b/t/0": 120})}

    resumed = await parts.entry.resume(view, ["a/t/1", "b/t/0", "b/t/1"], left)

    # b/t/1 was not in the vector when b left (a new partition): the
    # starting position decides it, as for any new split.
    assert resumed.entry == {"b/t/0": 120}
    assert resumed.claimed == {"b/t/0"}
    assert resumed.data_loss == {}


async def test_resume_below_the_log_start_is_data_loss(parts: Parts) -> None:
    await _stream_with_b(parts, log_start=150)
    view = parts.store.get("s")
    left = {"b": as_offsets({"b/t/0": 120, "b/t/1": 160})}

    with pytest.raises(DataLossError, match=r"b/t/0 resumes at 120.*now starts at 150"):
        await parts.entry.resume(view, ["b/t/0", "b/t/1"], left)

    resumed = await parts.entry.resume(view, ["b/t/0", "b/t/1"], left, fail_on_data_loss=False)
    assert resumed.entry == {"b/t/0": 150, "b/t/1": 160}
    assert list(resumed.data_loss) == ["b/t/0"]
    assert "failOnDataLoss" not in resumed.data_loss["b/t/0"]


async def test_resume_waits_for_an_unreachable_cluster(parts: Parts) -> None:
    await _stream_with_b(parts)
    view = parts.store.get("s")
    parts.kafka.cluster(B).down = True

    resumed = await parts.entry.resume(view, ["b/t/0"], {"b": as_offsets({"b/t/0": 120})})

    # Claimed (so it does not start at the starting position), not resolved.
    assert resumed.claimed == {"b/t/0"}
    assert resumed.entry == {}
