"""Live failover, migration and cluster changes while a Spark query runs; the
query never restarts (real etcd, tansu, Spark)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from multikafka.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.data import Feed, create_topics, produce_sequence
from tests.conftest import KafkaClusters, uid
from tests.e2e.spark_helpers import sink_keys, sink_rows, source, start_to_parquet
from tests.helpers import eventually, sequence_report, stream_doc

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _counts(keys: list[str], prefix: str) -> Counter[str]:
    return Counter(k for k in keys if k.startswith(prefix))


def _start(
    spark: Any, coordinator: CoordinatorThread, name: str, out: Path, **options: object
) -> Any:
    df = source(
        spark, coordinator.address, name, startingOffsets="earliest", queryId=name, **options
    )
    return start_to_parquet(df, out)


def _states(admin: AdminClient, name: str) -> dict[str, str]:
    return {c.cluster: c.state for c in admin.get_stream(name).clusters}


def test_planned_migration_reads_every_record_once(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    old, new = kafka.shared(2)
    topic = uid("migrate")
    for c in (old, new):
        create_topics(c.bootstrap, {topic: 2})
    produce_sequence(old.bootstrap, topic, 2, "old", range(1000))
    name = uid("migrate")
    admin.put_stream(stream_doc(name, {"old": (old.bootstrap, [topic])}))
    query = _start(spark, coordinator, name, tmp_path)
    run_id = query.runId
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "old:")) == 1000, timeout_s=60)
    # Migration: the new cluster joins; writes that reached the old one before
    # the cut-over are still read; then the old one drains.
    admin.put_stream(
        stream_doc(name, {"old": (old.bootstrap, [topic]), "new": (new.bootstrap, [topic])})
    )
    produce_sequence(old.bootstrap, topic, 2, "old", range(1000, 1500))
    info = admin.drain(name, "old")
    assert {c.cluster: c.state for c in info.clusters}["old"] == "DRAINING"
    drain = dict(next(c for c in info.clusters if c.cluster == "old").drain_offsets)
    assert sum(drain.values()) == 1500 + 4  # two fences per partition
    produce_sequence(new.bootstrap, topic, 2, "new", range(1000))
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "new:")) == 1000, timeout_s=60)
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "old:")) == 1500, timeout_s=60)
    # Spark commits a batch when the next one starts: keep data coming, as a
    # live stream would, so the batch that retired old's splits is committed.
    for lo in (1000, 1100):
        produce_sequence(new.bootstrap, topic, 2, "new", range(lo, lo + 100))
        eventually(
            lambda n=lo + 100: len(_counts(sink_keys(spark, tmp_path), "new:")) == n, timeout_s=60
        )
    missing, duplicated = sequence_report(sink_keys(spark, tmp_path), {"old": 1500, "new": 1200})
    assert not missing
    assert not duplicated
    # The old cluster's splits retired from the query, and the drain completed.
    history = eventually(
        lambda: [e for e in admin.history(name) if e.kind == "drain-complete"], timeout_s=30
    )
    assert history[0].cluster == "old"
    offsets = {q.query_id: dict(q.offsets) for q in admin.queries()}[name]
    assert not any(s.startswith("old/") for s in offsets)
    assert query.isActive
    assert query.runId == run_id
    assert query.exception() is None


def _failover_run(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    out: Path,
    *,
    strategy: str,
    margin_ms: int,
    automatic: bool = False,
) -> tuple[list[tuple[str, str, str, int, int]], Feed, Any]:
    """A stream read from a primary whose mirror is a STANDBY cluster; the
    primary is killed mid-stream and the stream fails over to the mirror."""
    primary = kafka.private("primary")
    (mirror,) = kafka.shared(1)
    topic = uid("fo")
    for c in (primary, mirror):
        create_topics(c.bootstrap, {topic: 2})
    name = uid("fo")
    doc = stream_doc(
        name, {"primary": (primary.bootstrap, [topic]), "mirror": (mirror.bootstrap, [topic])}
    )
    doc["clusters"]["mirror"]["state"] = "STANDBY"
    if automatic:
        doc["auto_failover"] = {
            "standby": "mirror",
            "unreachable_after": "2s",
            "margin_ms": margin_ms,
        }
    admin.put_stream(doc)
    feed = Feed([primary.bootstrap, mirror.bootstrap], topic, 2, "r", chunk=40, pause_s=0.05)
    query = _start(spark, coordinator, name, out)
    run_id = query.runId
    feed.start()
    # Kill the primary while records flow and the query is reading it.
    eventually(
        lambda: sum(1 for r in sink_rows(spark, out) if r[0] == "primary") > 500, timeout_s=60
    )
    feed.route([mirror.bootstrap])
    primary.require_process().process.kill()
    if automatic:
        eventually(
            lambda: _states(admin, name) == {"primary": "FAILED", "mirror": "ACTIVE"}, timeout_s=30
        )
    else:
        admin.failover(
            name, "primary", "mirror", strategy=strategy, margin_ms=margin_ms, reason="test"
        )
    sent_at_failover = len(feed.sent)
    eventually(lambda: len(feed.sent) > sent_at_failover + 400, timeout_s=30)
    total = feed.stop()
    eventually(lambda: len(_counts(sink_keys(spark, out), "r:")) == total, timeout_s=90)
    assert query.isActive
    assert query.runId == run_id
    assert query.exception() is None
    return sink_rows(spark, out), feed, name


def _duplicates_within_margin(
    rows: list[tuple[str, str, str, int, int]], feed: Feed, margin_ms: int
) -> None:
    keys = [k for _, k, _, _, _ in rows]
    missing, duplicated = sequence_report(keys, {"r": len(feed.sent)})
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    sent_ts = dict(feed.sent)
    last_from_primary = max(
        sent_ts[int(k.split(":")[1])]
        for c, k, _, _, _ in rows
        if c == "primary" and k.startswith("r:")
    )
    # Records re-read from the mirror are those inside the margin before the
    # last record read from the primary (1 s slack: tansu looks up by append time).
    window = sum(
        1 for _, ts in feed.sent if last_from_primary - margin_ms - 1000 <= ts <= last_from_primary
    )
    assert len(duplicated) <= window, f"{len(duplicated)} duplicates, margin window holds {window}"
    assert all(c == 2 for c in duplicated.values())


def test_failover_timestamp_strategy_loses_nothing(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    rows, feed, name = _failover_run(
        spark, coordinator, admin, kafka, tmp_path, strategy="timestamp", margin_ms=1000
    )
    _duplicates_within_margin(rows, feed, 1000)
    kinds = [e.kind for e in admin.history(name)]
    assert "failover" in kinds
    assert "translated" in kinds
    coord = coordinator.coordinator
    assert coord is not None
    assert coord.metrics.failovers.labels(name, "primary", "mirror", "admin")._value.get() == 1


def test_failover_identity_strategy_is_exact(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """An offset-preserving mirror (same records, same order, same offsets):
    the new cluster continues at the same offsets, no loss and no duplicate
    for everything the primary had durably handed to the query."""
    rows, feed, _ = _failover_run(
        spark, coordinator, admin, kafka, tmp_path, strategy="identity", margin_ms=0
    )
    keys = [k for _, k, _, _, _ in rows]
    missing, duplicated = sequence_report(keys, {"r": len(feed.sent)})
    assert not missing
    assert not duplicated
    # Offsets agree across the two clusters for every record.
    offsets = {(k, p, o) for _, k, _, p, o in rows if k.startswith("r:")}
    assert len({(k, p) for k, p, _ in offsets}) == len(offsets)


def test_automatic_failover_after_unreachability_window(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    rows, feed, name = _failover_run(
        spark,
        coordinator,
        admin,
        kafka,
        tmp_path,
        strategy="timestamp",
        margin_ms=1000,
        automatic=True,
    )
    _duplicates_within_margin(rows, feed, 1000)
    auto = [e for e in admin.history(name) if e.kind == "auto-failover"]
    assert len(auto) == 1
    assert "unreachable for" in auto[0].detail


def test_unreachable_cluster_does_not_stall_the_others(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    flaky = kafka.private("flaky")
    (steady,) = kafka.shared(1)
    topic = uid("stall")
    for c in (flaky, steady):
        create_topics(c.bootstrap, {topic: 2})
        produce_sequence(c.bootstrap, topic, 2, c.name, range(200))
    name = uid("stall")
    admin.put_stream(
        stream_doc(
            name, {"flaky": (flaky.bootstrap, [topic]), "steady": (steady.bootstrap, [topic])}
        )
    )
    query = _start(spark, coordinator, name, tmp_path)
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "")) >= 400, timeout_s=60)
    broker = flaky.require_process()
    broker.process.pause()
    try:
        produce_sequence(steady.bootstrap, topic, 2, steady.name, range(200, 600))
        eventually(
            lambda: len(_counts(sink_keys(spark, tmp_path), f"{steady.name}:")) == 600, timeout_s=60
        )
        assert broker.process.alive()  # still frozen: the others flowed without it
    finally:
        broker.process.resume()
    produce_sequence(flaky.bootstrap, topic, 2, flaky.name, range(200, 500))
    eventually(
        lambda: len(_counts(sink_keys(spark, tmp_path), f"{flaky.name}:")) == 500, timeout_s=60
    )
    missing, duplicated = sequence_report(
        sink_keys(spark, tmp_path), {steady.name: 600, flaky.name: 500}
    )
    assert not missing
    assert not duplicated
    assert query.exception() is None


def test_cluster_added_and_removed_mid_query(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    a, b = kafka.shared(2)
    topic = uid("addrm")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
        produce_sequence(c.bootstrap, topic, 2, c.name, range(300))
    name = uid("addrm")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    query = _start(spark, coordinator, name, tmp_path)
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), f"{a.name}:")) == 300, timeout_s=60)
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), f"{b.name}:")) == 300, timeout_s=60)
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    produce_sequence(a.bootstrap, topic, 2, a.name, range(300, 400))
    produce_sequence(b.bootstrap, topic, 2, b.name, range(300, 400))  # no longer part of the stream
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), f"{a.name}:")) == 400, timeout_s=60)
    # Spark commits a batch when the next one starts; b's splits left the vector.
    eventually(
        lambda: (
            not any(
                s.startswith("b/") for s in {q.query_id: q for q in admin.queries()}[name].offsets
            )
        ),
        timeout_s=30,
    )
    keys = sink_keys(spark, tmp_path)
    assert len(_counts(keys, f"{b.name}:")) == 300
    missing, duplicated = sequence_report(keys, {a.name: 400, b.name: 300})
    assert not missing
    assert not duplicated
    assert any(e.kind == "retired" and "cluster removed" in e.detail for e in admin.history(name))
    assert query.exception() is None


def test_connection_change_restarts_only_that_subreader(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    a, b = kafka.shared(2)
    moved = kafka.private("moved-to")
    topic = uid("conn")
    for c in (a, b, moved):
        create_topics(c.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "a", range(100))
    for c in (b, moved):  # the same records at the same offsets
        produce_sequence(c.bootstrap, topic, 1, "b", range(100))
    name = uid("conn")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    query = _start(spark, coordinator, name, tmp_path)
    eventually(
        lambda: (
            len(
                _counts(sink_keys(spark, tmp_path), "a:")
                + _counts(sink_keys(spark, tmp_path), "b:")
            )
            == 200
        ),
        timeout_s=60,
    )
    coord = coordinator.coordinator
    assert coord is not None
    restarts = coord.metrics.subreader_restarts
    admin.put_stream(
        stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (moved.bootstrap, [topic])})
    )
    produce_sequence(moved.bootstrap, topic, 1, "b", range(100, 150))
    produce_sequence(a.bootstrap, topic, 1, "a", range(100, 150))
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "b:")) == 150, timeout_s=60)
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "a:")) == 150, timeout_s=60)
    eventually(lambda: restarts.labels(name, "b")._value.get() >= 1, timeout_s=20)
    assert restarts.labels(name, "a")._value.get() == 0
    missing, duplicated = sequence_report(sink_keys(spark, tmp_path), {"a": 150, "b": 150})
    assert not missing
    assert not duplicated
    assert query.exception() is None


def test_failover_then_migrate_back(
    spark: Any,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """east fails over to its mirror west; east comes back empty; the stream
    migrates back (east ACTIVE, west drained). One query run throughout."""
    from multikafka import PreconditionError
    from multikafka.devstack.data import fence

    east = kafka.private("east")
    (west,) = kafka.shared(1)
    topic = uid("back")
    for c in (east, west):
        create_topics(c.bootstrap, {topic: 2})
    name = uid("back")
    doc = stream_doc(name, {"east": (east.bootstrap, [topic]), "west": (west.bootstrap, [topic])})
    doc["clusters"]["west"]["state"] = "STANDBY"
    admin.put_stream(doc)
    feed = Feed([east.bootstrap, west.bootstrap], topic, 2, "r", chunk=40, pause_s=0.05)
    query = _start(spark, coordinator, name, tmp_path)
    run_id = query.runId
    feed.start()
    eventually(
        lambda: sum(1 for r in sink_rows(spark, tmp_path) if r[0] == "east") > 300, timeout_s=60
    )
    feed.route([west.bootstrap])
    east.require_process().process.kill()
    admin.failover(name, "east", "west", strategy="timestamp", margin_ms=1000)
    eventually(
        lambda: sum(1 for r in sink_rows(spark, tmp_path) if r[0] == "west") > 300, timeout_s=60
    )
    east = kafka.replace(east)
    create_topics(east.bootstrap, {topic: 2})

    def activated() -> bool:
        try:
            admin.activate(name, "east")
        except PreconditionError:
            return False
        return True

    eventually(activated, timeout_s=30)
    feed.route([east.bootstrap])
    fence(west.bootstrap, topic, 2)
    admin.drain(name, "west")
    sent = len(feed.sent)
    eventually(lambda: len(feed.sent) > sent + 300, timeout_s=30)
    total = feed.stop()
    eventually(lambda: len(_counts(sink_keys(spark, tmp_path), "r:")) == total, timeout_s=90)
    eventually(lambda: any(e.kind == "drain-complete" for e in admin.history(name)), timeout_s=30)
    rows = sink_rows(spark, tmp_path)
    keys = [k for _, k, _, _, _ in rows]
    missing, duplicated = sequence_report(keys, {"r": total})
    assert not missing
    # Only the failover re-reads (inside its margin); the migration back
    # duplicates nothing, and east's new data is read from its start.
    assert len(duplicated) < total // 4
    assert query.runId == run_id
    assert query.isActive
