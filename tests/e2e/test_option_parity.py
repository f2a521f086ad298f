"""Spark Kafka-source options in real Spark queries (real etcd, tansu,
Spark): minOffsetsPerTrigger holds a micro-batch until enough records are
there and maxTriggerDelay releases it; the progress shows the latest
offsets; startingOffsetsByTimestamp starts each split at its time; a
kafka.* setting reaches the reader consumers; a refused one fails with
its reason."""

from __future__ import annotations

import ast
import json
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.spark._compat import ADMISSION_CONTROL
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import (
    batch_source,
    run_available_now,
    sink_rows,
    source,
    start_to_parquet,
)
from tests.helpers import eventually, produce_sequence, seeded_stream, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

INTERNALS = ("multikafka.spark._compat",)


pytestmark = [pytest.mark.integration, pytest.mark.spark]


def batch_sizes(query: StreamingQuery) -> list[int]:
    """Rows of each micro-batch that read any, in order."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def as_doc(value: Any) -> dict[str, Any]:
    """An offset of a query's progress (PySpark 4.0 gives the repr of a dict)."""
    if not isinstance(value, str):
        return dict(value)
    try:
        return dict(json.loads(value))
    except json.JSONDecodeError:
        return dict(ast.literal_eval(value))


def test_min_offsets_hold_a_batch_until_enough_records_or_the_delay(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    (a,) = kafka.shared(1)
    stream, topic = seeded_stream(admin, a.bootstrap, "minoff", records=4)  # 5 with the fence
    delay_s = 12
    query = start_to_parquet(
        source(
            spark,
            coordinator.address,
            stream,
            startingOffsets="earliest",
            minOffsetsPerTrigger=20,
            maxTriggerDelay=f"{delay_s}s",
        ),
        tmp_path,
    )
    # 5 records wait for 20; 25 more make 30, read as one micro-batch. (On
    # Spark < 4.2 a run's first micro-batch is never held: the 5 go at once,
    # and the 25 make a batch of their own.)
    if not ADMISSION_CONTROL:
        eventually(lambda: batch_sizes(query) == [5], timeout_s=60)
    produce_sequence(a.bootstrap, topic, 1, "b", range(24))
    batches = [30] if ADMISSION_CONTROL else [5, 25]
    eventually(lambda: batch_sizes(query) == batches, timeout_s=60)
    # 3 more wait for maxTriggerDelay, counted from the last micro-batch.
    produce_sequence(a.bootstrap, topic, 1, "c", range(2))
    sent = time.time()
    eventually(lambda: batch_sizes(query) == [*batches, 3], timeout_s=60)
    assert len(sink_rows(spark, tmp_path)) == 33
    *_, first, second = (p for p in query.recentProgress if p["numInputRows"])
    started, released = trigger_time(first), trigger_time(second)
    assert sent - started < delay_s - 3, "the test sent the 3 records too late to tell"
    assert released - started >= delay_s - 1, (
        f"released {released - started:.1f}s after the last batch, "
        f"{released - sent:.1f}s after the records arrived: before maxTriggerDelay"
    )
    query.stop()


def trigger_time(progress: dict[str, Any]) -> float:
    """When a micro-batch's trigger fired (epoch seconds)."""
    stamp = progress["timestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def test_progress_reports_the_latest_offsets_beyond_the_batch(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    (a,) = kafka.shared(1)
    stream, topic = seeded_stream(admin, a.bootstrap, "latestoff", records=39)  # 40
    query = start_to_parquet(
        source(
            spark,
            coordinator.address,
            stream,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=10,
        ),
        tmp_path,
    )
    first = eventually(lambda: [p for p in query.recentProgress if p["numInputRows"]])[0]
    (src,) = first["sources"]
    assert as_doc(src["endOffset"]) == {"a": {topic: [10]}}
    eventually(lambda: len(sink_rows(spark, tmp_path)) == 40, timeout_s=60)
    if ADMISSION_CONTROL:
        assert as_doc(src["latestOffset"]) == {"a": {topic: [40]}}
        assert as_doc(query.lastProgress["sources"][0]["latestOffset"]) == {"a": {topic: [40]}}
    else:  # Spark < 4.2 asks no reportLatestOffset: it shows the batch's end
        assert as_doc(src["latestOffset"]) == {"a": {topic: [10]}}
    query.stop()


def test_starting_offsets_by_timestamp_start_each_split_at_its_time(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("bytime")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "old", range(6))  # 4 per partition
    t = int(time.time() * 1000)
    eventually(lambda: int(time.time() * 1000) > t, timeout_s=1, interval_s=0.001)
    produce_sequence(a.bootstrap, topic, 2, "new", range(4))  # 3 per partition
    stream = uid("bytime")
    admin.put_stream(stream_doc(stream, {"a": (a.bootstrap, [topic])}))

    run_available_now(
        spark,
        coordinator.address,
        stream,
        tmp_path,
        startingOffsets="earliest",  # for partition 1, not named
        startingOffsetsByTimestamp=json.dumps({"a": {topic: {"0": t + 1}}}),
    )
    offsets = sorted((p, o) for _, _, _, p, o in sink_rows(spark, tmp_path))
    assert [o for p, o in offsets if p == 0] == [4, 5, 6]
    assert [o for p, o in offsets if p == 1] == list(range(7))

    # No record after the time: the query fails naming the split, or (latest)
    # starts there.
    future = int(time.time() * 1000) + 3_600_000
    times = json.dumps({f"a/{topic}/1": future})
    with pytest.raises(Exception, match=f"a/{topic}/1") as info:
        batch_source(spark, coordinator.address, stream, startingOffsetsByTimestamp=times).count()
    assert "startingOffsetsByTimestampStrategy=latest" in str(info.value)
    rows = batch_source(
        spark,
        coordinator.address,
        stream,
        startingOffsetsByTimestamp=times,
        startingOffsetsByTimestampStrategy="latest",
    ).select("partition", "offset")
    assert sorted(tuple(r) for r in rows.collect()) == [(0, o) for o in range(7)]
    # And a batch read ends at a time.
    rows = batch_source(
        spark,
        coordinator.address,
        stream,
        endingOffsetsByTimestamp=json.dumps({f"a/{topic}/0": t + 1, f"a/{topic}/1": t + 1}),
    ).select("partition", "offset")
    assert sorted(tuple(r) for r in rows.collect()) == [(p, o) for p in (0, 1) for o in range(4)]


def test_a_kafka_option_reaches_the_reader_consumers(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
) -> None:
    """A broker holds a fetch until it has fetch.min.bytes or
    fetch.wait.max.ms passed (the test stream sets 10 ms): a read of 10 small
    records whose consumers ask for 1 MB and wait 5 s cannot finish sooner
    than 5 s; one without those settings (either of them dropped) takes well
    under that."""
    (a,) = kafka.shared(1)
    stream, _ = seeded_stream(admin, a.bootstrap, "kafkaopt", records=9)  # 10
    assert batch_source(spark, coordinator.address, stream).count() == 10  # warm
    began = time.monotonic()
    assert batch_source(spark, coordinator.address, stream).count() == 10
    plain_s = time.monotonic() - began
    began = time.monotonic()
    slow = batch_source(
        spark,
        coordinator.address,
        stream,
        **{"kafka.fetch.wait.max.ms": 5000, "kafka.fetch.min.bytes": 1_000_000},
    )
    assert slow.count() == 10
    slow_s = time.monotonic() - began
    assert plain_s < 4, f"a plain read took {plain_s:.1f}s"
    assert slow_s >= 5, f"the read took {slow_s:.1f}s: the consumer did not wait for 1 MB or 5 s"


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("kafka.group.id", "commitGroupId"),
        ("kafka.sasl.password", "never from query options"),
        ("kafka.max.poll.records", "no per-poll record limit"),
    ],
)
def test_a_refused_option_fails_the_read_with_its_reason(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    option: str,
    says: str,
) -> None:
    (a,) = kafka.shared(1)
    stream, _ = seeded_stream(admin, a.bootstrap, "refused", records=1)
    with pytest.raises(Exception, match=f"option {option}") as info:
        batch_source(spark, coordinator.address, stream, **{option: "s3cret"}).count()
    assert says in str(info.value)
    assert "s3cret" not in str(info.value)
