"""The ``mm2`` failover strategy over the fakes: the leader's offset syncs
(:class:`multikafka.coordinator.translation.mm2.tracker.MirrorSyncs`), the
translation of a query's positions with them, the fallback to ``timestamp``,
the failover record's note, the summary a new leader takes over, and the
per-partition gauges.

Stream ``s``: ``a`` (h:1, topic ``t``, 2 partitions) ACTIVE and ``b`` (h:2,
``a.t``, MM2's replica of ``a`` under the default policy) STANDBY. MM2's
offset syncs are written to ``mm2-offset-syncs.b.internal`` on ``a``, as MM2
writes them (its default location).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from multikafka.coordinator.translation.mm2.tracker import MirrorSyncs
from multikafka.core._offsets import as_offsets
from multikafka.core.exceptions import ValidationError
from multikafka.core.mm2_records import Checkpoint, OffsetSync
from multikafka.core.model import FailoverStrategy, SplitId
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.translation.mm2.tracker",
    "multikafka.core._offsets",
)


A, B = "h:1", "h:2"
SYNCS = "mm2-offset-syncs.b.internal"
NOW_MS = 1_700_000_000_000


def doc(**mm2: Any) -> dict[str, Any]:
    d = stream_doc("s", {"a": (A, ["t"]), "b": (B, ["a.t"])}, states={"b": "STANDBY"})
    d["clusters"]["b"]["mm2"] = {"source": "a", **mm2}
    return d


def sync(
    partition: int, upstream: int, downstream: int, *, at_ms: int = NOW_MS
) -> tuple[bytes, bytes, int]:
    key, value = OffsetSync("t", partition, upstream, downstream).encode()
    return key, value, at_ms


def write_syncs(parts: Parts, *syncs: tuple[bytes, bytes, int], bootstrap: str = A) -> None:
    cluster = parts.kafka.cluster(bootstrap)
    for key, value, at_ms in syncs:
        cluster.append_internal(SYNCS, key, value, timestamp_ms=at_ms)


@pytest.fixture
async def mirrored(parts: Parts) -> Parts:
    """Source partitions with 40 records each, the mirror's with 140 (MM2
    copied them after 100 older records), and syncs for partition 0 only."""
    for partition in (0, 1):
        parts.kafka.cluster(A).add_records("t", partition, [1000 * (i + 1) for i in range(40)])
        parts.kafka.cluster(B).add_records("a.t", partition, [1000 * (i + 1) for i in range(140)])
    await parts.put(doc())
    write_syncs(parts, sync(0, 0, 100), sync(0, 10, 110), sync(0, 20, 125))
    await parts.duties.syncs.poll()
    return parts


async def translate(parts: Parts, start: dict[str, int]) -> tuple[dict[str, int], dict[str, str]]:
    view = parts.store.get("s")
    record = parts.translator.record_for(view, "b", start)
    assert record is not None
    splits = [SplitId("b", "a.t", 0), SplitId("b", "a.t", 1)]
    entry, notes = await parts.translator.translate(view, record, splits, start, {})
    return entry, {n.split: n.how for n in notes}


async def test_a_position_at_a_sync_starts_at_its_copy_and_past_it_one_after(
    mirrored: Parts,
) -> None:
    await mirrored.lifecycle.failover("s", "a", "b", strategy=FailoverStrategy.MM2)
    # Position 20 = record 20 unread: its copy 125 is read (never 126: that
    # would skip it). Position 23: record 20 was read, 21-22 may be copies
    # anywhere after 125, so the query goes on at 126 (MM2's upstreamStep).
    entry, how = await translate(mirrored, {"a/t/0": 20, "a/t/1": 5})
    assert entry["b/a.t/0"] == 125
    assert "mm2 from a/t/0@20 by the sync 20 -> 125" in how["b/a.t/0"]
    entry, _ = await translate(mirrored, {"a/t/0": 23, "a/t/1": 5})
    assert entry["b/a.t/0"] == 126
    entry, _ = await translate(mirrored, {"a/t/0": 19, "a/t/1": 5})
    assert entry["b/a.t/0"] == 111  # from the sync 10 -> 110, past it
    entry, _ = await translate(mirrored, {"a/t/0": 10, "a/t/1": 5})
    assert entry["b/a.t/0"] == 110


async def test_a_partition_without_a_sync_falls_back_to_timestamp_and_says_so(
    mirrored: Parts,
) -> None:
    view = await mirrored.lifecycle.failover(
        "s", "a", "b", strategy=FailoverStrategy.MM2, margin_ms=2500
    )
    record = view.status.failover_into("b")
    assert record is not None
    assert "syncs known for 1 of 2 partitions" in record.note
    assert "none for t/1: those fall back to timestamp" in record.note
    failover = next(e for e in mirrored.history.entries("s") if e.kind == "failover")
    assert record.note in failover.detail
    # a/t/1 read up to 5 (record 4 at 5000 ms): timestamp 2500 ms on b's
    # partition, whose record 2 has time 3000 ms.
    mirrored.marks.add("s", "a/t/1", 4, 5000)
    entry, how = await translate(mirrored, {"a/t/0": 20, "a/t/1": 5})
    assert entry["b/a.t/1"] == 2
    assert how["b/a.t/1"].startswith("no MM2 offset sync at or before a/t/1@5, so timestamp: ")
    assert "2500 ms margin" in how["b/a.t/1"]


async def test_a_position_before_the_first_sync_is_not_translated(mirrored: Parts) -> None:
    write_syncs(mirrored, sync(1, 30, 130))
    await mirrored.duties.syncs.poll()
    await mirrored.lifecycle.failover("s", "a", "b", strategy=FailoverStrategy.MM2)
    entry, how = await translate(mirrored, {"a/t/0": 20, "a/t/1": 29})
    assert "no MM2 offset sync at or before a/t/1@29" in how["b/a.t/1"]
    assert entry["b/a.t/1"] == 0  # no read mark either: earliest, never 130


async def test_mm2_into_a_cluster_that_is_no_replica_of_the_failed_one(parts: Parts) -> None:
    d = stream_doc(
        "s", {"a": (A, ["t"]), "b": (B, ["a.t"]), "c": ("h:3", ["t"])}, states={"b": "STANDBY"}
    )
    d["clusters"]["b"]["mm2"] = {"source": "a"}
    d["clusters"]["c"]["state"] = "STANDBY"
    await parts.put(d)
    with pytest.raises(ValidationError) as err:
        await parts.lifecycle.failover("s", "a", "c", strategy=FailoverStrategy.MM2)
    assert err.value.field == "strategy"
    assert "'c' is no MirrorMaker 2 replica of 'a' (it has no mm2 block)" in str(err.value)
    # Automatic failovers go on, with timestamp, and say so.
    view = await parts.lifecycle.failover(
        "s", "a", "c", strategy=FailoverStrategy.MM2, automatic=True
    )
    record = view.status.failover_into("c")
    assert record is not None
    assert record.note.endswith("every split falls back to timestamp")


async def test_a_new_leader_translates_with_the_summary_and_reads_on(mirrored: Parts) -> None:
    syncs = mirrored.duties.syncs
    await syncs.flush()
    kv = await mirrored.etcd.get("/t/mm2-syncs/s")
    assert kv is not None
    stored = json.loads(kv.value)["b"]
    assert stored["positions"] == {"0": 3}
    assert stored["syncs"]["t/0"] == [[20, 125], [10, 110], [0, 100]]
    # The source dies; a new leader loads the summary and translates with it.
    mirrored.kafka.cluster(A).down = True
    successor = MirrorSyncs(
        mirrored.etcd, "/t", mirrored.store, mirrored.discovery, mirrored.metrics
    )
    await successor.load()
    hit = successor.translate("s", "b", SplitId("a", "t", 0), 23)
    assert hit is not None
    assert hit.offset == 126
    # Back up, it reads on from where the summary stopped: the syncs already
    # read are not taken again (an older sync would reset the partition).
    mirrored.kafka.cluster(A).down = False
    write_syncs(mirrored, sync(0, 30, 140))
    mirrored.discovery.client("s", "a").client.read_at.clear()  # type: ignore[union-attr]
    await successor.poll()
    assert successor.translate("s", "b", SplitId("a", "t", 0), 30) == (
        140,
        OffsetSync("t", 0, 30, 140),
    )
    assert successor.translate("s", "b", SplitId("a", "t", 0), 20) == (
        125,
        OffsetSync("t", 0, 20, 125),
    )


def open_readers(parts: Parts) -> set[str]:
    """The readers the leader holds open on each fake cluster client."""
    clients = [parts.discovery.client("s", c) for c in ("a", "b")]
    return {key[0] for cc in clients if cc is not None for key in cc.client.read_at}  # type: ignore[attr-defined]


async def test_a_mirror_s_readers_close_when_its_replication_changes_or_it_goes(
    mirrored: Parts,
) -> None:
    write_checkpoint(mirrored, Checkpoint("g", "a.t", 1, 3, 103))
    await mirrored.duties.syncs.poll()
    assert open_readers(mirrored) == {"s/b/offset syncs", "s/b/checkpoints"}
    # Another replication (another alias: other topics): the old readers go.
    mirrored.kafka.cluster(A).append_internal("mm2-offset-syncs.west.internal", *sync(0, 1, 2)[:2])
    await mirrored.put(doc(target_alias="west"))
    await mirrored.duties.syncs.poll()
    assert {k for k in mirrored.discovery.client("s", "a").client.read_at} == {  # type: ignore[union-attr]
        ("s/b/offset syncs", "mm2-offset-syncs.west.internal", 0)
    }
    # No mirror any more: nothing is read, nothing held.
    plain = doc()
    del plain["clusters"]["b"]["mm2"]
    plain["clusters"]["b"]["topics"] = ["t"]
    await mirrored.put(plain)
    await mirrored.duties.syncs.poll()
    assert open_readers(mirrored) == set()


async def test_records_that_are_no_syncs_are_skipped(mirrored: Parts) -> None:
    cluster = mirrored.kafka.cluster(A)
    cluster.append_internal(SYNCS, b"garbage", b"\x00")
    write_syncs(mirrored, sync(0, 30, 140))
    await mirrored.duties.syncs.poll()
    hit = mirrored.duties.syncs.translate("s", "b", SplitId("a", "t", 0), 31)
    assert hit is not None
    assert hit.offset == 141


async def test_a_failed_source_is_not_read_and_its_syncs_are_kept(mirrored: Parts) -> None:
    await mirrored.lifecycle.failover("s", "a", "b", strategy=FailoverStrategy.MM2)
    calls = mirrored.kafka.cluster(A).calls
    write_syncs(mirrored, sync(0, 30, 140))
    await mirrored.duties.syncs.poll()
    assert mirrored.kafka.cluster(A).calls == calls
    hit = mirrored.duties.syncs.translate("s", "b", SplitId("a", "t", 0), 31)
    assert hit is not None
    assert hit.offset == 126


async def test_syncs_on_the_target_under_kip_716(parts: Parts) -> None:
    parts.kafka.cluster(A).add_records("t", 0, [1000] * 40)
    await parts.put(doc(offset_syncs_topic_location="target"))
    key, value = OffsetSync("t", 0, 7, 70).encode()
    parts.kafka.cluster(B).append_internal("mm2-offset-syncs.a.internal", key, value)
    await parts.duties.syncs.poll()
    hit = parts.duties.syncs.translate("s", "b", SplitId("a", "t", 0), 8)
    assert hit is not None
    assert hit.offset == 71


async def test_sync_age_and_upstream_lag_per_partition(mirrored: Parts) -> None:
    labels = {"stream": "s", "cluster": "b", "topic": "t"}
    age = mirrored.sample("multikafka_mm2_sync_age_seconds", **labels, partition="0")
    assert age is not None
    assert age > 0
    # 40 records on the source, the newest sync of record 20: 21-39 follow it.
    assert mirrored.sample("multikafka_mm2_upstream_lag_records", **labels, partition="0") == 19
    # No sync for partition 1: all 40 are behind, and it has no age.
    assert mirrored.sample("multikafka_mm2_upstream_lag_records", **labels, partition="1") == 40
    assert mirrored.sample("multikafka_mm2_sync_age_seconds", **labels, partition="1") is None
    # The mm2 block removed: the gauges go, and so does the summary.
    d = doc()
    del d["clusters"]["b"]["mm2"]
    d["clusters"]["b"]["topics"] = ["t"]
    await mirrored.put(d)
    await mirrored.duties.syncs.poll()
    await mirrored.duties.syncs.flush()
    assert mirrored.sample("multikafka_mm2_upstream_lag_records", **labels, partition="0") is None
    assert mirrored.sample("multikafka_mm2_sync_age_seconds", **labels, partition="0") is None
    assert await mirrored.etcd.get("/t/mm2-syncs/s") is None


def write_checkpoint(parts: Parts, cp: Checkpoint) -> None:
    key, value = cp.encode()
    parts.kafka.cluster(B).append_internal("a.checkpoints.internal", key, value)


async def test_without_a_sync_a_query_s_group_checkpoint_translates(mirrored: Parts) -> None:
    # MM2's checkpoint of group g for the mirror's partition 1 (which has no
    # sync): g's offset 3 on the source is 103 on the mirror. Another group's
    # and another topic's checkpoints are not the query's.
    write_checkpoint(mirrored, Checkpoint("g", "a.t", 1, 3, 103))
    write_checkpoint(mirrored, Checkpoint("other", "a.t", 1, 5, 105))
    write_checkpoint(mirrored, Checkpoint("g", "a.elsewhere", 1, 5, 999))
    await mirrored.duties.syncs.poll()
    await mirrored.lifecycle.failover("s", "a", "b", strategy=FailoverStrategy.MM2)
    view = mirrored.store.get("s")
    record = view.status.failover_into("b")
    assert record is not None
    start = {"a/t/0": 20, "a/t/1": 5}
    splits = [SplitId("b", "a.t", 0), SplitId("b", "a.t", 1)]
    entry, notes = await mirrored.translator.translate(
        view, record, splits, start, {}, group_id="g"
    )
    how = {n.split: n.how for n in notes}
    assert entry == {"b/a.t/0": 125, "b/a.t/1": 103}  # the sync first, where there is one
    assert how["b/a.t/1"] == "mm2 from a/t/1@5 by group g's checkpoint 3 -> 103"
    # A checkpoint past the query's position (the group committed further,
    # or the query restarted from an older Spark checkpoint) is not used:
    # it could skip records the query did not read.
    entry, notes = await mirrored.translator.translate(
        view, record, splits, {"a/t/0": 20, "a/t/1": 2}, {}, group_id="g"
    )
    assert entry["b/a.t/1"] == 0
    assert "no MM2 offset sync" in {n.split: n.how for n in notes}["b/a.t/1"]
    # Without a group, no checkpoint.
    entry, _ = await mirrored.translator.translate(view, record, splits, start, {})
    assert entry["b/a.t/1"] == 0


async def test_the_query_s_commit_group_is_kept_for_translation(mirrored: Parts) -> None:
    write_checkpoint(mirrored, Checkpoint("g", "a.t", 1, 3, 103))
    await mirrored.duties.syncs.poll()
    view = mirrored.store.get("s")
    start = {"a/t/0": 20, "a/t/1": 5}
    await mirrored.batches.commit(view, "q", as_offsets(start), group_id="g")
    progress = mirrored.queries.get("q")
    assert progress is not None
    assert progress.group_id == "g"
    assert type(progress).from_json("q", progress.to_json()).group_id == "g"
    await mirrored.lifecycle.failover("s", "a", "b", strategy=FailoverStrategy.MM2)
    plan = await mirrored.batches.latest(
        mirrored.store.get("s"),
        "q",
        as_offsets(start),
        max_records=0,
        cap=None,
        fail_on_data_loss=True,
    )
    assert plan.end["b/a.t/1"] == 103


async def test_a_drained_source_s_mirror_starts_at_its_drain_ends_translated(
    mirrored: Parts,
) -> None:
    """A planned migration onto an MM2 mirror: the source is drained (queries
    read it up to the captured ends), then the mirror activated: its splits
    start where MM2's rule puts the drain ends, not at its starting position."""
    view = await mirrored.lifecycle.drain("s", "a")
    assert view.status.drains["a"] == {"a/t/0": 40, "a/t/1": 40}
    assert "b (MM2 replica) starts at the drain ends translated" in (
        mirrored.history.entries("s")[-1].detail
    )
    write_syncs(mirrored, sync(0, 40, 140))
    await mirrored.duties.syncs.poll()
    await mirrored.lifecycle.activate("s", "b")
    start = {"a/t/0": 30, "a/t/1": 40}
    entry, notes = await mirrored.entry.resolve(
        mirrored.store.get("s"), start, ["b/a.t/0", "b/a.t/1"], {}
    )
    # Partition 0: its end 40 has a sync (40 -> 140). Partition 1 has no
    # sync: its starting position (earliest).
    assert entry == {"b/a.t/0": 140, "b/a.t/1": 0}
    assert [n.how for n in notes] == [
        "mm2 from the drain end a/t/0@40 by the sync 40 -> 140 = 140; no copy of the last "
        "records read found past it: the estimate stands"
    ]
    # Without the drain (the source ACTIVE again), the mirror's starting position.
    await mirrored.lifecycle.activate("s", "a")
    entry, notes = await mirrored.entry.resolve(
        mirrored.store.get("s"), start, ["b/a.t/0", "b/a.t/1"], {}
    )
    assert entry == {"b/a.t/0": 0, "b/a.t/1": 0}
    assert notes == []


async def test_the_summary_keeps_the_newest_syncs_and_the_earliest(parts: Parts) -> None:
    from multikafka.coordinator.translation.mm2.tracker import SUMMARY_SYNCS

    parts.kafka.cluster(A).add_records("t", 0, [1000] * 10)
    await parts.put(doc())
    # A sync every 100 records over 100,000 records: the store keeps a few
    # dozen, the summary at most SUMMARY_SYNCS + 1 of them.
    write_syncs(parts, *(sync(0, u, u + 7) for u in range(0, 100_001, 100)))
    await parts.duties.syncs.poll()
    await parts.duties.syncs.flush()
    kv = await parts.etcd.get("/t/mm2-syncs/s")
    assert kv is not None
    pairs = json.loads(kv.value)["b"]["syncs"]["t/0"]
    assert len(pairs) == SUMMARY_SYNCS + 1
    assert pairs[0] == [100_000, 100_007]  # the newest
    assert pairs[-1] == [0, 7]  # the earliest
    assert len(parts.duties.syncs._mirrors["s"]["b"].store.kept("t", 0)) > len(pairs)
    # A new leader translates with the summary: near the newest sync exactly,
    # far behind from an older sync (more duplicates, never a skip).
    successor = MirrorSyncs(parts.etcd, "/t", parts.store, parts.discovery, parts.metrics)
    await successor.load()
    near = successor.translate("s", "b", SplitId("a", "t", 0), 99_950)
    assert near is not None
    assert near.offset == 99_908  # the sync 99,900 -> 99,907, and past it: + 1
    far = successor.translate("s", "b", SplitId("a", "t", 0), 1_234)
    assert far is not None
    assert far.offset <= 1_234 + 7
