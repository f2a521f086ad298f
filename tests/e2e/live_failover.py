"""A live failover while a Spark query runs, and the view of it tests check:
the query's Parquet sink, the coordinator's answers (used by
``test_failover.py`` and, for a job submitted to a standalone cluster,
``test_spark_standalone.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import Feed, create_topics
from multikafka.v1 import common_pb2
from tests.conftest import Cluster, KafkaClusters
from tests.e2e.spark_helpers import sink_rows, source, start_to_parquet
from tests.helpers import (
    assert_duplicates_within_margin,
    assert_exactly_once,
    eventually,
    stream_doc,
    uid,
)

Row = tuple[str, str, str, int, int]


@dataclass
class E2E:
    """One test's view of the session's Spark, coordinator and clusters, and
    of the Parquet sink its query writes."""

    spark: Any
    coordinator: CoordinatorThread
    admin: AdminClient
    kafka: KafkaClusters
    out: Path
    query: Any = field(default=None)

    def topic(self, *clusters: Cluster, partitions: int = 2) -> str:
        """A new topic on each of ``clusters``."""
        topic = uid("t")
        for c in clusters:
            create_topics(c.bootstrap, {topic: partitions})
        return topic

    def start(self, stream: str) -> Any:
        df = source(
            self.spark, self.coordinator.address, stream, startingOffsets="earliest", queryId=stream
        )
        self.query = start_to_parquet(df, self.out)
        return self.query

    def rows(self) -> list[Row]:
        return sink_rows(self.spark, self.out)

    def keys(self) -> list[str]:
        return [k for _, k, _, _, _ in self.rows()]

    def count(self, prefix: str) -> int:
        """Distinct records ``prefix...`` in the sink."""
        return len({k for k in self.keys() if k.startswith(prefix)})

    def wait_count(self, prefix: str, n: int, timeout_s: float = 60) -> None:
        eventually(lambda: self.count(prefix) == n, timeout_s=timeout_s)

    def rows_from(self, cluster: str) -> int:
        return sum(1 for r in self.rows() if r[0] == cluster)

    def states(self, stream: str) -> dict[str, str]:
        clusters = self.admin.get_stream(stream).clusters
        return {c.cluster: common_pb2.ClusterState.Name(c.state) for c in clusters}

    def assert_exactly_once(self, expected: dict[str, int]) -> None:
        assert_exactly_once(self.keys(), expected)

    def assert_never_restarted(self, run_id: object) -> None:
        assert self.query.isActive
        assert self.query.runId == run_id
        assert self.query.exception() is None


@dataclass
class FailedOver:
    stream: str
    topic: str
    feed: Feed
    run_id: object
    cut: int  # the first record sent to the mirror only


def read_then_lose_primary(
    e2e: E2E,
    primary: Cluster,
    mirror: Cluster,
    *,
    strategy: str,
    margin_ms: int,
    automatic: bool = False,
    rewritten: bool = False,
) -> FailedOver:
    """A stream read from ``primary`` while ``mirror`` (STANDBY) receives the
    same records (``rewritten``: with other values, as a transforming mirror
    copies them); the primary is killed mid-stream and the stream fails over
    to the mirror (by an admin call, or by itself after its window)."""
    topic = e2e.topic(primary, mirror)
    name = uid("fo")
    doc = stream_doc(
        name, {primary.name: (primary.bootstrap, [topic]), mirror.name: (mirror.bootstrap, [topic])}
    )
    doc["clusters"][mirror.name]["state"] = "STANDBY"
    if automatic:
        doc["auto_failover"] = {
            "standby": mirror.name,
            "unreachable_after": "2s",
            "margin_ms": margin_ms,
        }
    e2e.admin.put_stream(doc)
    feed = Feed(
        [primary.bootstrap, mirror.bootstrap],
        topic,
        2,
        "r",
        chunk=40,
        pause_s=0.05,
        rewritten=[mirror.bootstrap] if rewritten else [],
    )
    run_id = e2e.start(name).runId
    feed.start()
    eventually(lambda: e2e.rows_from(primary.name) > 500, timeout_s=60)
    cut = feed.route([mirror.bootstrap])
    primary.require_process().process.kill()
    if automatic:
        failed_over = {primary.name: "FAILED", mirror.name: "ACTIVE"}
        eventually(lambda: e2e.states(name) == failed_over, timeout_s=30)
    else:
        e2e.admin.failover(
            name, primary.name, mirror.name, strategy=strategy, margin_ms=margin_ms, reason="test"
        )
    return FailedOver(name, topic, feed, run_id, cut)


def failover_run(
    e2e: E2E, *, strategy: str, margin_ms: int, automatic: bool = False, rewritten: bool = False
) -> FailedOver:
    primary = e2e.kafka.private("primary")
    (mirror,) = e2e.kafka.shared(1)
    mirror = Cluster("mirror", mirror.bootstrap, mirror.broker)
    run = read_then_lose_primary(
        e2e,
        primary,
        mirror,
        strategy=strategy,
        margin_ms=margin_ms,
        automatic=automatic,
        rewritten=rewritten,
    )
    sent = len(run.feed.sent)
    eventually(lambda: len(run.feed.sent) > sent + 400, timeout_s=30)
    total = run.feed.stop()
    e2e.wait_count("r:", total, timeout_s=90)
    e2e.assert_never_restarted(run.run_id)
    return run


def duplicates_within_margin(
    rows: list[Row], run: FailedOver, margin_ms: int, primary: str = "primary"
) -> None:
    """Nothing lost; what was read twice lies inside the failover's margin."""
    assert_duplicates_within_margin(
        ((c, k) for c, k, _, _, _ in rows), run.feed, run.cut, margin_ms, primary
    )


def read_exactly_once_across(e2e: E2E, run: FailedOver) -> list[str]:
    """Every record the feed sent read once, from both clusters (the query
    resumed on the mirror right after the copy of the last record it read
    on the primary); returns the translations' details."""
    e2e.assert_exactly_once({"r": len(run.feed.sent)})
    assert {c for c, k, *_ in e2e.rows() if k.startswith("r:")} >= {"primary", "mirror"}
    translated = [e.detail for e in e2e.admin.history(run.stream) if e.kind == "translated"]
    assert translated
    assert all("matched the last" in d for d in translated), translated
    return translated


def assert_identity_exact(e2e: E2E, run: FailedOver) -> None:
    """An ``identity`` failover to an offset-preserving mirror (the feed sends
    record n to partition n % 2 of a new topic on each cluster): every record
    read once, at the offset it has on both clusters, from both clusters."""
    e2e.assert_exactly_once({"r": len(run.feed.sent)})
    rows = [(c, int(k[2:]), p, o) for c, k, _, p, o in e2e.rows() if k.startswith("r:")]
    assert all(p == n % 2 and o == n // 2 for _, n, p, o in rows)
    assert {c for c, *_ in rows} == {"primary", "mirror"}
