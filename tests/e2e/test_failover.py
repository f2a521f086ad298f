"""Live failover, migration and cluster changes while a Spark query runs; the
query never restarts (real etcd, tansu, Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from multikafka import PreconditionError
from multikafka.coordinator.translation.mm2.bound import read_again
from multikafka.core.admin_client import AdminClient
from multikafka.core.model import SplitId
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics, fence
from multikafka.devstack.mirror import mirrored_stream
from multikafka.v1 import common_pb2
from tests.conftest import Cluster, KafkaClusters
from tests.e2e.live_failover import (
    E2E,
    assert_identity_exact,
    duplicates_within_margin,
    failover_run,
    read_exactly_once_across,
    read_then_lose_primary,
)
from tests.helpers import eventually, produce_sequence, stream_doc, uid

INTERNALS = ("multikafka.coordinator.translation.mm2.bound",)


pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def e2e(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> E2E:
    return E2E(spark, coordinator, admin, kafka, tmp_path)


@pytest.fixture
def e2e_any(
    any_spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> E2E:
    """:func:`e2e`, once in the classic session and once over Spark Connect."""
    return E2E(any_spark, coordinator, admin, kafka, tmp_path)


def test_planned_migration_reads_every_record_once(e2e: E2E) -> None:
    old, new = e2e.kafka.shared(2)
    topic = e2e.topic(old, new)
    produce_sequence(old.bootstrap, topic, 2, "old", range(1000))
    name = uid("migrate")
    e2e.admin.put_stream(stream_doc(name, {"old": (old.bootstrap, [topic])}))
    run_id = e2e.start(name).runId
    e2e.wait_count("old:", 1000)
    # Migration: the new cluster joins; writes that reached the old one before
    # the cut-over are still read; then the old one drains.
    e2e.admin.put_stream(
        stream_doc(name, {"old": (old.bootstrap, [topic]), "new": (new.bootstrap, [topic])})
    )
    produce_sequence(old.bootstrap, topic, 2, "old", range(1000, 1500))
    info = e2e.admin.drain(name, "old")
    drained = next(c for c in info.clusters if c.cluster == "old")
    assert drained.state == common_pb2.DRAINING
    assert sum(drained.drain_offsets.values()) == 1500 + 4  # two fences per partition
    produce_sequence(new.bootstrap, topic, 2, "new", range(1000))
    e2e.wait_count("new:", 1000)
    e2e.wait_count("old:", 1500)
    # Spark commits a batch when the next one starts: keep data coming, as a
    # live stream would, so the batch that retired old's splits is committed.
    for lo in (1000, 1100):
        produce_sequence(new.bootstrap, topic, 2, "new", range(lo, lo + 100))
        e2e.wait_count("new:", lo + 100)
    e2e.assert_exactly_once({"old": 1500, "new": 1200})
    # The old cluster's splits retired from the query, and the drain completed.
    done = eventually(
        lambda: [e for e in e2e.admin.history(name) if e.kind == "drain-complete"], timeout_s=30
    )
    assert done[0].cluster == "old"
    offsets = {q.query_id: dict(q.offsets) for q in e2e.admin.queries()}[name]
    assert not any(s.startswith("old/") for s in offsets)
    e2e.assert_never_restarted(run_id)


def test_failover_timestamp_strategy_reads_every_record_once(e2e_any: E2E) -> None:
    e2e = e2e_any
    run = failover_run(e2e, strategy="timestamp", margin_ms=1000)
    read_exactly_once_across(e2e, run)
    kinds = [e.kind for e in e2e.admin.history(run.stream)]
    assert "failover" in kinds
    coord = e2e.coordinator.coordinator
    assert coord is not None
    assert (
        coord.metrics.failovers.labels(run.stream, "primary", "mirror", "admin")._value.get() == 1
    )
    matched = coord.metrics.translations.labels(run.stream, "mirror", "matched")._value.get()
    assert matched == 2


def test_a_mirror_that_rewrites_records_falls_back_to_the_margin_and_says_so(e2e: E2E) -> None:
    """No copy of the last records read is found on a mirror that changed
    them: the translation's estimate stands (read again within the margin),
    nothing is lost, and the history says so."""
    run = failover_run(e2e, strategy="timestamp", margin_ms=1000, rewritten=True)
    duplicates_within_margin(e2e.rows(), run, 1000)
    translated = [e.detail for e in e2e.admin.history(run.stream) if e.kind == "translated"]
    assert len(translated) == 2
    assert all("the estimate stands" in d for d in translated), translated


def test_failover_identity_strategy_is_exact(e2e: E2E) -> None:
    """An offset-preserving mirror (same records, same order, same offsets):
    the new cluster continues at the same offsets: no loss, no duplicate."""
    run = failover_run(e2e, strategy="identity", margin_ms=0)
    assert_identity_exact(e2e, run)


def test_failover_mm2_strategy_reads_every_record_once(e2e: E2E) -> None:
    """A MirrorMaker 2 mirror (remote topic ``primary.<topic>``, offsets
    shifted by earlier records and transaction markers, offset syncs written
    as MM2 writes them every ``offset.lag.max`` = 20 records): the primary
    dies mid-stream and the stream fails over with ``mm2``. The newest sync
    at or before each position is where the mirror is read from; the query
    goes on right after the copy of the last record it read: nothing lost,
    nothing read twice (MM2's rule alone reads again what lies between)."""
    primary = e2e.kafka.private("primary")
    (mirror,) = e2e.kafka.shared(1)
    lag_max = 20
    stream = mirrored_stream(
        "mm2",
        ("primary", primary.bootstrap),
        ("mirror", mirror.bootstrap),
        uid("t"),
        2,
        shifts=(7, 3),
        marker_every=4,
        offset_lag_max=lag_max,
    )
    name = uid("mm2")
    e2e.admin.put_stream(stream.document(name))
    feed = stream.feed("r", chunk=40, pause_s=0.05)
    run_id = e2e.start(name).runId
    feed.start()
    eventually(lambda: e2e.rows_from("primary") > 600, timeout_s=60)
    cut = feed.route([mirror.bootstrap])  # producers move; MM2 stops copying
    # The leader read every sync MM2 wrote (syncs lost with a source that
    # died before they were read cost more re-reads: the failover_precision
    # benchmark measures that); then the primary dies.
    assert stream.copy is not None
    newest = {(s.topic, s.partition): s for s in stream.copy.syncs}
    coord = e2e.coordinator.coordinator
    assert coord is not None

    def every_sync_read() -> bool:
        duties = coord.duties
        return duties is not None and all(
            duties.syncs.translate(name, "mirror", SplitId("primary", t, p), s.upstream_offset)
            == (s.downstream_offset, s)
            for (t, p), s in newest.items()
        )

    eventually(every_sync_read, timeout_s=30)
    primary.require_process().process.kill()
    e2e.admin.failover(name, "primary", "mirror", strategy="mm2", margin_ms=1000, reason="test")
    sent = len(feed.sent)
    eventually(lambda: len(feed.sent) > sent + 400, timeout_s=30)
    total = feed.stop()
    e2e.wait_count("r:", total, timeout_s=90)
    e2e.assert_never_restarted(run_id)

    # Every record once: the sync's translation is where the mirror is read
    # from, and the query goes on right after the copy of its last record.
    e2e.assert_exactly_once({"r": total})
    rows = e2e.rows()
    assert any(c == "mirror" and int(k[2:]) < cut for c, k, *_ in rows if k.startswith("r:"))
    # MM2's rule alone would have read again what lies between each
    # position and the newest sync the leader read by the kill.
    positions: dict[tuple[str, int], int] = {}
    for cluster, k, _, partition, offset in rows:
        if cluster == "primary" and k.startswith("r:"):
            tp = (stream.topic, partition)
            positions[tp] = max(positions.get(tp, 0), offset + 1)
    again = read_again(stream.copy.syncs, positions, lag_max)
    assert not again.unsynced
    translated = [e for e in e2e.admin.history(name) if e.kind == "translated"]
    assert len(translated) == 2
    for t in translated:
        assert "by the sync" in t.detail
        assert "matched the last" in t.detail


def test_automatic_failover_after_unreachability_window(e2e: E2E) -> None:
    run = failover_run(e2e, strategy="timestamp", margin_ms=1000, automatic=True)
    read_exactly_once_across(e2e, run)
    auto = [e for e in e2e.admin.history(run.stream) if e.kind == "auto-failover"]
    assert len(auto) == 1
    assert "unreachable for" in auto[0].detail


def test_failover_then_migrate_back(e2e: E2E) -> None:
    """east fails over to its mirror west; east comes back empty; the stream
    migrates back (east ACTIVE, west drained). One query run throughout."""
    east = e2e.kafka.private("east")
    (west,) = e2e.kafka.shared(1)
    west = Cluster("west", west.bootstrap, west.broker)
    run = read_then_lose_primary(e2e, east, west, strategy="timestamp", margin_ms=1000)
    eventually(lambda: e2e.rows_from("west") > 300, timeout_s=60)
    east = e2e.kafka.replace(east)
    create_topics(east.bootstrap, {run.topic: 2})

    def activated() -> bool:
        try:
            e2e.admin.activate(run.stream, "east")
        except PreconditionError:
            return False  # the query still holds east's splits from before
        return True

    eventually(activated, timeout_s=30)
    run.feed.route([east.bootstrap])
    fence(west.bootstrap, run.topic, 2)
    e2e.admin.drain(run.stream, "west")
    sent = len(run.feed.sent)
    # The feed keeps running, as a live stream does: Spark commits the batch
    # that retired west's splits only when it starts the next one.
    eventually(
        lambda: any(e.kind == "drain-complete" for e in e2e.admin.history(run.stream)), timeout_s=60
    )
    eventually(lambda: len(run.feed.sent) > sent + 300, timeout_s=30)
    total = run.feed.stop()
    e2e.wait_count("r:", total, timeout_s=90)
    # Neither the failover nor the migration back reads anything twice, and
    # east's new data is read from its start.
    e2e.assert_exactly_once({"r": len(run.feed.sent)})
    e2e.assert_never_restarted(run.run_id)


def test_unreachable_cluster_does_not_stall_the_others(e2e: E2E) -> None:
    flaky = e2e.kafka.private("flaky")
    (steady,) = e2e.kafka.shared(1)
    topic = e2e.topic(flaky, steady)
    for c in (flaky, steady):
        produce_sequence(c.bootstrap, topic, 2, c.name, range(200))
    name = uid("stall")
    e2e.admin.put_stream(
        stream_doc(
            name, {"flaky": (flaky.bootstrap, [topic]), "steady": (steady.bootstrap, [topic])}
        )
    )
    e2e.start(name)
    eventually(lambda: e2e.count("") >= 400, timeout_s=60)
    broker = flaky.require_process()
    broker.process.pause()
    try:
        produce_sequence(steady.bootstrap, topic, 2, steady.name, range(200, 600))
        e2e.wait_count(f"{steady.name}:", 600)
        assert broker.process.frozen()  # the others flowed while it stayed frozen
    finally:
        broker.process.resume()
    produce_sequence(flaky.bootstrap, topic, 2, flaky.name, range(200, 500))
    e2e.wait_count(f"{flaky.name}:", 500)
    e2e.assert_exactly_once({steady.name: 600, flaky.name: 500})
    assert e2e.query.exception() is None


def test_cluster_added_and_removed_mid_query(e2e: E2E) -> None:
    a, b = e2e.kafka.shared(2)
    topic = e2e.topic(a, b)
    for c in (a, b):
        produce_sequence(c.bootstrap, topic, 2, c.name, range(300))
    name = uid("addrm")
    only_a = stream_doc(name, {"a": (a.bootstrap, [topic])})
    e2e.admin.put_stream(only_a)
    e2e.start(name)
    e2e.wait_count(f"{a.name}:", 300)
    e2e.admin.put_stream(
        stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    )
    e2e.wait_count(f"{b.name}:", 300)
    e2e.admin.put_stream(only_a)
    produce_sequence(a.bootstrap, topic, 2, a.name, range(300, 400))
    produce_sequence(b.bootstrap, topic, 2, b.name, range(300, 400))  # no longer part of the stream
    e2e.wait_count(f"{a.name}:", 400)
    # Spark commits a batch's end only when it starts the next batch: more data
    # makes that batch, whose committed vector no longer holds b's splits.
    produce_sequence(a.bootstrap, topic, 2, a.name, range(400, 450))
    e2e.wait_count(f"{a.name}:", 450)
    eventually(
        lambda: (
            not any(
                s.startswith("b/")
                for s in {q.query_id: q for q in e2e.admin.queries()}[name].offsets
            )
        ),
        timeout_s=30,
    )
    assert e2e.count(f"{b.name}:") == 300
    e2e.assert_exactly_once({a.name: 450, b.name: 300})
    assert any(
        e.kind == "retired" and "cluster removed" in e.detail for e in e2e.admin.history(name)
    )
    assert e2e.query.exception() is None


def test_connection_change_restarts_only_that_subreader(e2e: E2E) -> None:
    a, b = e2e.kafka.shared(2)
    moved = e2e.kafka.private("moved-to")
    topic = e2e.topic(a, b, moved, partitions=1)
    produce_sequence(a.bootstrap, topic, 1, "a", range(100))
    for c in (b, moved):  # the same records at the same offsets
        produce_sequence(c.bootstrap, topic, 1, "b", range(100))
    name = uid("conn")
    e2e.admin.put_stream(
        stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    )
    e2e.start(name)
    eventually(lambda: e2e.count("a:") + e2e.count("b:") == 200, timeout_s=60)
    coord = e2e.coordinator.coordinator
    assert coord is not None
    restarts = coord.metrics.subreader_restarts
    e2e.admin.put_stream(
        stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (moved.bootstrap, [topic])})
    )
    produce_sequence(moved.bootstrap, topic, 1, "b", range(100, 150))
    produce_sequence(a.bootstrap, topic, 1, "a", range(100, 150))
    e2e.wait_count("b:", 150)
    e2e.wait_count("a:", 150)
    eventually(lambda: restarts.labels(name, "b")._value.get() >= 1, timeout_s=20)
    assert restarts.labels(name, "a")._value.get() == 0
    e2e.assert_exactly_once({"a": 150, "b": 150})
    assert e2e.query.exception() is None
