"""Failover translation and entry offsets over the fakes:

* :meth:`multikafka.coordinator.translation.FailoverTranslator.record_for`: which
  failover record decides where a cluster's splits start for a query;
* :meth:`multikafka.coordinator.translation.FailoverTranslator.translate`: the
  ``timestamp`` strategy (read mark at the position - 1, minus the margin,
  looked up by time on the new cluster; abandoned positions; earliest without
  a mark, before anything was read, or without a counterpart), the
  ``identity`` strategy, and an unreachable target;
* :meth:`multikafka.coordinator.planning.entry.EntryOffsets.resolve` and
  :func:`multikafka.coordinator.planning.entry.query_for`: starting positions of plain new
  clusters, unreachable clusters left out, translated and plain clusters in
  one call.
"""

from __future__ import annotations

from typing import Any

from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.planning.entry import query_for
from multikafka.coordinator.state.stream_status import FailoverRecord
from multikafka.coordinator.translation import Translation
from multikafka.coordinator.translation.failover import ESTIMATE, EXACT
from multikafka.core.model import (
    ClusterState,
    FailoverStrategy,
    SplitId,
    StartingPosition,
    StartKind,
)
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.clusters.kafka",
    "multikafka.coordinator.planning.entry",
    "multikafka.coordinator.state.stream_status",
    "multikafka.coordinator.translation",
    "multikafka.coordinator.translation.failover",
)


A, B, C = "h:1", "h:2", "h:3"

#: Record times of the new cluster's partitions: offset ``earliest + i`` has
#: time ``1000 * (i + 1)`` ms.
TIMES = [1000 * (i + 1) for i in range(10)]


def fill(parts: Parts, bootstrap: str, topic: str, earliest: dict[int, int]) -> None:
    """Partitions ``earliest`` keys of ``topic`` with records at TIMES, each
    partition starting at its given log start offset."""
    cluster = parts.kafka.cluster(bootstrap)
    for partition, start in earliest.items():
        cluster.earliest[(topic, partition)] = start
        cluster.add_records(topic, partition, TIMES)


def read(parts: Parts, split: str, offset: int, ts: int) -> None:
    """A mark of a range read up to ``offset`` (its last record, at ``ts``)."""
    parts.marks.add("s", split, offset, ts, next=offset + 1)


def b_splits(*partitions: int) -> list[SplitId]:
    return [SplitId("b", "t", p) for p in partitions]


async def failed_over(
    parts: Parts,
    strategy: FailoverStrategy = FailoverStrategy.TIMESTAMP,
    margin_ms: int = 2500,
    **doc_extra: Any,
) -> FailoverRecord:
    """Stream ``s``: ``a`` (h:1) ACTIVE, ``b`` (h:2) STANDBY, failed over a -> b."""
    await parts.put(
        stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}, states={"b": "STANDBY"}, **doc_extra)
    )
    await parts.lifecycle.failover("s", "a", "b", strategy=strategy, margin_ms=margin_ms)
    record = parts.store.get("s").status.failover_into("b")
    assert record is not None
    return record


# -- record_for ----------------------------------------------------------------


async def test_record_for_is_the_failover_into_the_cluster_while_its_source_is_failed(
    parts: Parts,
) -> None:
    parts.kafka.cluster(A).add_records("t", 0, TIMES)
    await parts.put(stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}, states={"b": "STANDBY"}))
    start = {"a/t/0": 4}
    assert parts.translator.record_for(parts.store.get("s"), "b", start) is None  # no failover yet

    await parts.lifecycle.failover(
        "s", "a", "b", strategy=FailoverStrategy.IDENTITY, margin_ms=1234
    )
    view = parts.store.get("s")
    record = parts.translator.record_for(view, "b", start)
    assert record is not None
    assert (record.from_cluster, record.to_cluster) == ("a", "b")
    assert (record.strategy, record.margin_ms) == (FailoverStrategy.IDENTITY, 1234)
    assert record == view.status.failovers[-1]

    # a query that never read the source, and a cluster nothing failed over into
    assert parts.translator.record_for(view, "b", {"b/t/0": 0}) is None
    assert parts.translator.record_for(view, "b", {"<no splits>": 0}) is None
    assert parts.translator.record_for(view, "a", start) is None

    # the source comes back: the record no longer translates
    await parts.lifecycle.activate("s", "a")
    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert view.status.failover_into("b") == record  # still recorded...
    assert parts.translator.record_for(view, "b", start) is None  # ...but not used


async def test_record_for_takes_the_latest_failover_into_the_cluster(parts: Parts) -> None:
    await parts.put(
        stream_doc(
            "s",
            {"a": (A, ["t"]), "c": (C, ["t"]), "b": (B, ["t"])},
            states={"b": "STANDBY"},
        )
    )
    await parts.lifecycle.failover("s", "a", "b", margin_ms=1000)
    await parts.lifecycle.failover("s", "c", "b", margin_ms=2000)
    view = parts.store.get("s")
    assert [(r.from_cluster, r.to_cluster) for r in view.status.failovers] == [
        ("a", "b"),
        ("c", "b"),
    ]

    record = parts.translator.record_for(view, "b", {"a/t/0": 1, "c/t/0": 2})
    assert record is not None
    assert (record.from_cluster, record.margin_ms) == ("c", 2000)
    record = parts.translator.record_for(view, "b", {"c/t/0": 2})
    assert record is not None
    assert record.from_cluster == "c"


async def test_record_for_drops_a_failover_whose_target_failed_or_whose_source_moved_on(
    parts: Parts,
) -> None:
    """Each of its own: a -> b decides nothing once b failed over too (b is
    no longer ACTIVE); a -> c decides nothing once a failed over to b since
    (c stays ACTIVE, but the latest failover from a is another)."""
    doc = {"a": (A, ["t"]), "b": (B, ["t"]), "c": (C, ["t"])}
    await parts.put(stream_doc("s", doc, states={"b": "STANDBY", "c": "STANDBY"}))
    await parts.lifecycle.failover("s", "a", "b", margin_ms=1000)
    assert parts.translator.record_for(parts.store.get("s"), "b", {"a/t/0": 1}) is not None
    await parts.lifecycle.failover("s", "b", "c", margin_ms=1000)
    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert parts.translator.record_for(view, "b", {"a/t/0": 1}) is None  # b not ACTIVE

    await parts.put(stream_doc("s2", doc, states={"b": "STANDBY", "c": "STANDBY"}))
    await parts.lifecycle.failover("s2", "a", "c", margin_ms=1000)
    await parts.lifecycle.activate("s2", "a")
    await parts.lifecycle.failover("s2", "a", "b", margin_ms=1000)
    view = parts.store.get("s2")
    assert view.spec.clusters["c"].state is ClusterState.ACTIVE
    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert view.status.failover_into("c") is not None
    assert parts.translator.record_for(view, "c", {"a/t/0": 1}) is None  # a moved on to b
    assert parts.translator.record_for(view, "b", {"a/t/0": 1}) is not None


# -- translate: timestamp ------------------------------------------------------


async def test_timestamp_starts_at_the_time_of_the_mark_before_the_position_minus_the_margin(
    parts: Parts,
) -> None:
    fill(parts, B, "t", {0: 0, 1: 100})
    record = await failed_over(parts, margin_ms=2500)
    # marks at and after the position must not count: only [0, position) was read
    for offset, ts in [(3, 4000), (7, 8000), (8, 9000), (9, 9500)]:
        read(parts, "a/t/0", offset, ts)
    read(parts, "a/t/1", 4, 7000)

    entry, notes = await parts.translator.translate(
        parts.store.get("s"), record, b_splits(0, 1), {"a/t/0": 8, "a/t/1": 5}, {}
    )

    # a/t/0: position 8 -> mark a/t/0@7 (8000 ms) - 2500 = 5500 -> first record
    # at or after it on b/t/0 is offset 5 (6000 ms).
    # a/t/1: mark a/t/1@4 (7000 ms) - 2500 = 4500 -> offset 100 + 4 (5000 ms).
    assert entry == {"b/t/0": 5, "b/t/1": 104}
    assert notes == [
        Translation(
            "b/t/0",
            "a/t/0",
            5,
            "time of a/t/0@7 (8000 ms) - 2500 ms margin (no fingerprints of a/t/0@7: not matched)",
            5,
            ESTIMATE,
        ),
        Translation(
            "b/t/1",
            "a/t/1",
            104,
            "time of a/t/1@4 (7000 ms) - 2500 ms margin (no fingerprints of a/t/1@4: not matched)",
            104,
            ESTIMATE,
        ),
    ]


async def test_timestamp_uses_a_lower_abandoned_position_instead_of_the_start(
    parts: Parts,
) -> None:
    fill(parts, B, "t", {0: 0, 1: 100})
    record = await failed_over(parts, margin_ms=2500)
    for offset, ts in [(2, 5000), (5, 9000)]:
        read(parts, "a/t/0", offset, ts)
        read(parts, "a/t/1", offset, ts)

    entry, notes = await parts.translator.translate(
        parts.store.get("s"),
        record,
        b_splits(0, 1),
        {"a/t/0": 6, "a/t/1": 6},
        # a/t/0: the query gave up [3, ...): it read only up to 3.
        # a/t/1: an abandoned position above the start does not raise it.
        {"a/t/0": 3, "a/t/1": 50},
    )

    # a/t/0: position 3 -> mark @2 (5000 ms) - 2500 = 2500 -> offset 2 (3000 ms)
    # a/t/1: position 6 -> mark @5 (9000 ms) - 2500 = 6500 -> offset 100 + 6 (7000 ms)
    assert entry == {"b/t/0": 2, "b/t/1": 106}
    assert notes == [
        Translation(
            "b/t/0",
            "a/t/0",
            2,
            "time of a/t/0@2 (5000 ms) - 2500 ms margin (no fingerprints of a/t/0@2: not matched)",
            2,
            ESTIMATE,
        ),
        Translation(
            "b/t/1",
            "a/t/1",
            106,
            "time of a/t/1@5 (9000 ms) - 2500 ms margin (no fingerprints of a/t/1@5: not matched)",
            106,
            ESTIMATE,
        ),
    ]


async def test_timestamp_falls_back_to_earliest_and_says_why(parts: Parts) -> None:
    fill(parts, B, "t", {0: 10, 1: 20, 2: 30, 3: 40})
    record = await failed_over(parts, margin_ms=2500)
    read(parts, "a/t/0", 7, 8000)  # a mark, but after the position of a/t/0
    read(parts, "a/t/1", 0, 1000)  # a mark, but nothing read on a/t/1 yet

    entry, notes = await parts.translator.translate(
        parts.store.get("s"),
        record,
        b_splits(0, 1, 2, 3),
        {"a/t/0": 5, "a/t/1": 0, "a/t/2": 0},  # no a/t/3: b/t/3 has no counterpart
        {"a/t/2": 0},
    )

    assert entry == {"b/t/0": 10, "b/t/1": 20, "b/t/2": 30, "b/t/3": 40}
    assert notes == [
        Translation("b/t/0", "a/t/0", 10, "no read mark on a/t/0@5: earliest", 10, ESTIMATE),
        Translation("b/t/1", "a/t/1", 20, "nothing read yet on a/t/1@0: earliest", 20, ESTIMATE),
        Translation("b/t/2", "a/t/2", 30, "nothing read yet on a/t/2@0: earliest", 30, ESTIMATE),
        Translation("b/t/3", "", 40, "no counterpart on the failed cluster: earliest", 40),
    ]


async def test_timestamp_with_the_target_unreachable_resolves_nothing(parts: Parts) -> None:
    fill(parts, B, "t", {0: 0, 1: 0})
    record = await failed_over(parts)
    read(parts, "a/t/0", 4, 5000)
    view = parts.store.get("s")
    start = {"a/t/0": 5, "a/t/1": 0}

    parts.kafka.cluster(B).down = True
    assert await parts.translator.translate(view, record, b_splits(0, 1), start, {}) == ({}, [])

    parts.kafka.cluster(B).down = False  # the next batch tries again
    entry, notes = await parts.translator.translate(view, record, b_splits(0, 1), start, {})
    assert entry == {"b/t/0": 2, "b/t/1": 0}  # 5000 - 2500 -> offset 2 (3000 ms)
    assert [n.split for n in notes] == ["b/t/0", "b/t/1"]


# -- translate: identity -------------------------------------------------------


async def test_identity_starts_at_the_same_offset_lowered_by_an_abandoned_position(
    parts: Parts,
) -> None:
    fill(parts, B, "t", {0: 0, 1: 0, 2: 0, 3: 7})
    record = await failed_over(parts, strategy=FailoverStrategy.IDENTITY)
    read(parts, "a/t/0", 2, 5000)  # marks do not matter to identity

    entry, notes = await parts.translator.translate(
        parts.store.get("s"),
        record,
        b_splits(0, 1, 2, 3),
        {"a/t/0": 8, "a/t/1": 6, "a/t/2": 0},
        {"a/t/0": 20, "a/t/1": 3},
    )

    assert entry == {"b/t/0": 8, "b/t/1": 3, "b/t/2": 0, "b/t/3": 7}
    assert notes == [
        Translation("b/t/0", "a/t/0", 8, "identity from a/t/0@8", -1, EXACT),
        Translation("b/t/1", "a/t/1", 3, "identity from a/t/1@3", -1, EXACT),
        Translation("b/t/2", "a/t/2", 0, "identity from a/t/2@0", -1, EXACT),
        Translation("b/t/3", "", 7, "no counterpart on the failed cluster: earliest", 7),
    ]


# -- entry offsets ---------------------------------------------------------------


def test_query_for_maps_each_starting_position_to_its_lookup() -> None:
    assert query_for(None) == OffsetQuery("earliest")
    assert query_for(StartingPosition(StartKind.EARLIEST)) == OffsetQuery("earliest")
    assert query_for(StartingPosition(StartKind.LATEST)) == OffsetQuery("latest")
    assert query_for(StartingPosition(StartKind.TIMESTAMP, 4321)) == OffsetQuery("timestamp", 4321)


async def test_resolve_starts_plain_new_clusters_at_their_starting_position(
    parts: Parts,
) -> None:
    for bootstrap in ("h:1", "h:2", "h:3"):
        fill(parts, bootstrap, "t", {0: 10, 1: 20})
    doc = stream_doc("s", {"e": ("h:1", ["t"]), "l": ("h:2", ["t"]), "ts": ("h:3", ["t"])})
    doc["clusters"]["l"]["starting"] = "latest"
    doc["clusters"]["ts"]["starting"] = {"timestamp": 3500}
    await parts.put(doc)
    new = [f"{c}/t/{p}" for c in ("e", "l", "ts") for p in (0, 1)]

    entry, notes = await parts.entry.resolve(parts.store.get("s"), {"<no splits>": 0}, new, {})

    assert entry == {
        "e/t/0": 10,  # earliest (the default)
        "e/t/1": 20,
        "l/t/0": 20,  # latest: earliest + 10 records
        "l/t/1": 30,
        "ts/t/0": 13,  # first record at or after 3500 ms: the 4th (4000 ms)
        "ts/t/1": 23,
    }
    assert notes == []


async def test_resolve_leaves_out_the_splits_of_an_unreachable_cluster(parts: Parts) -> None:
    fill(parts, A, "t", {0: 10})
    fill(parts, B, "t", {0: 20})
    doc = stream_doc("s", {"up": (A, ["t"]), "down": (B, ["t"])})
    doc["clusters"]["down"]["starting"] = "latest"
    await parts.put(doc)
    view = parts.store.get("s")
    new = ["up/t/0", "down/t/0"]

    parts.kafka.cluster(B).down = True
    assert await parts.entry.resolve(view, {}, new, {}) == ({"up/t/0": 10}, [])

    parts.kafka.cluster(B).down = False  # tried again next batch
    assert await parts.entry.resolve(view, {}, new, {}) == ({"up/t/0": 10, "down/t/0": 30}, [])


async def test_resolve_translates_a_failover_target_and_starts_a_plain_cluster_in_one_call(
    parts: Parts,
) -> None:
    fill(parts, B, "t", {0: 0, 1: 100})
    fill(parts, C, "u", {0: 50})
    await parts.put(
        stream_doc(
            "s",
            {"a": (A, ["t"]), "b": (B, ["t"]), "c": (C, ["u"])},
            states={"b": "STANDBY"},
        )
    )
    await parts.lifecycle.failover("s", "a", "b", margin_ms=1000)
    read(parts, "a/t/0", 5, 7000)
    view = parts.store.get("s")
    start = {"a/t/0": 6, "a/t/1": 0}

    entry, notes = await parts.entry.resolve(view, start, ["b/t/0", "b/t/1", "c/u/0"], {"a/t/1": 0})

    # b/t/0: mark a/t/0@5 (7000 ms) - 1000 = 6000 -> offset 5; b/t/1: nothing
    # read on a/t/1 -> earliest; c/u/0: plain, earliest.
    assert entry == {"b/t/0": 5, "b/t/1": 100, "c/u/0": 50}
    assert notes == [
        Translation(
            "b/t/0",
            "a/t/0",
            5,
            "time of a/t/0@5 (7000 ms) - 1000 ms margin (no fingerprints of a/t/0@5: not matched)",
            5,
            ESTIMATE,
        ),
        Translation("b/t/1", "a/t/1", 100, "nothing read yet on a/t/1@0: earliest", 100, ESTIMATE),
    ]

    # a query that never read a: b is a plain new cluster for it (earliest)
    assert await parts.entry.resolve(view, {"c/u/0": 55}, ["b/t/0", "b/t/1"], {}) == (
        {"b/t/0": 0, "b/t/1": 100},
        [],
    )
