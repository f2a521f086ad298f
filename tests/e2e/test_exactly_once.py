"""A Spark query over a stream in several clusters reads every record exactly
once: across clusters and topics, across restarts from its checkpoint, and
when topics are added while it runs (real etcd, tansu, Spark)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.spark._compat import ADMISSION_CONTROL
from tests.conftest import Cluster, KafkaClusters
from tests.e2e.spark_helpers import (
    batch_source,
    run_available_now,
    sink_keys,
    sink_rows,
    source,
    start_to_parquet,
)
from tests.helpers import assert_exactly_once, eventually, produce_sequence, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTERNALS = ("multikafka.spark._compat",)


pytestmark = [pytest.mark.integration, pytest.mark.spark]


@dataclass
class TwoByTwo:
    stream: str
    expected: dict[str, int]  # label -> records
    topics: dict[str, str]  # "t1"/"t2" -> topic name
    east: Cluster
    west: Cluster


def _two_by_two(kafka: KafkaClusters, admin: AdminClient, n: int) -> TwoByTwo:
    """A stream over 2 clusters x 2 topics (3 partitions each) with ``n``
    records per (cluster, topic)."""
    a, b = kafka.shared(2)
    topics = {"t1": uid("orders"), "t2": uid("payments")}
    for c in (a, b):
        create_topics(c.bootstrap, {t: 3 for t in topics.values()})
    expected = {}
    for cid, c in (("east", a), ("west", b)):
        for t in topics.values():
            label = f"{cid}-{t}"
            produce_sequence(c.bootstrap, t, 3, label, range(n))
            expected[label] = n
    name = uid("eo")
    admin.put_stream(
        stream_doc(
            name,
            {
                "east": (a.bootstrap, list(topics.values())),
                "west": (b.bootstrap, list(topics.values())),
            },
        )
    )
    return TwoByTwo(name, expected, topics, a, b)


def test_two_clusters_two_topics_exactly_once(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    s = _two_by_two(kafka, admin, 3000)
    name, expected = s.stream, s.expected
    # 12,000 records in batches of at most 5,000: Spark 4.2+ runs them all in
    # one Trigger.AvailableNow run; Spark 4.0 and 4.1 ask a Python source for
    # its latest offsets once per run, so each run reads one batch.
    progress = []
    for _ in range(1 if ADMISSION_CONTROL else 3):
        query = run_available_now(
            spark,
            coordinator.address,
            name,
            tmp_path,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=5000,
        )
        progress += query.recentProgress
    rows = sink_rows(spark, tmp_path)
    assert_exactly_once([k for _, k, _, _, _ in rows], expected)
    # Each row's cluster/topic/partition/offset is where its key was produced.
    for cluster, key, topic, partition, _offset in rows:
        if key.startswith("__fence__"):
            continue
        label, seq = key.rsplit(":", 1)
        assert label == f"{cluster}-{topic}"
        assert partition == int(seq) % 3
    # maxOffsetsPerTrigger bounded every batch.
    assert all(p["numInputRows"] <= 5000 for p in progress)
    assert len([p for p in progress if p["numInputRows"]]) >= 3


def test_restart_from_checkpoint_continues_exactly_once(
    any_spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    spark = any_spark  # classic, then Spark Connect
    s = _two_by_two(kafka, admin, 2000)
    name, expected, topics = s.stream, s.expected, s.topics
    # First run: a continuous query, stopped in the middle of the stream.
    df = source(
        spark, coordinator.address, name, startingOffsets="earliest", maxOffsetsPerTrigger=1500
    )
    query = start_to_parquet(df, tmp_path)
    eventually(lambda: len(sink_keys(spark, tmp_path)) > 0, timeout_s=60)
    query.stop()
    first = len(sink_keys(spark, tmp_path))
    assert first < 2000 * 4 + 12, "stopped before the end, so the restart has work to do"
    # More data arrives while it is down.
    for cid, c in (("east", s.east), ("west", s.west)):
        produce_sequence(c.bootstrap, topics["t1"], 3, f"{cid}-{topics['t1']}", range(2000, 2500))
    expected = {k: (2500 if topics["t1"] in k else v) for k, v in expected.items()}
    # Second run from the same checkpoint. Spark 4.0 and 4.1 end a
    # Trigger.AvailableNow run that starts with an unfinished batch once that
    # batch is done, without asking a Python source for more: a run more.
    for _ in range(1 if ADMISSION_CONTROL else 2):
        run_available_now(spark, coordinator.address, name, tmp_path, startingOffsets="earliest")
    assert_exactly_once(sink_keys(spark, tmp_path), expected)


def test_topic_added_mid_query_is_read_from_earliest(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    a, b = kafka.shared(2)
    t1, t2 = uid("first"), uid("added")
    create_topics(a.bootstrap, {t1: 2})
    create_topics(b.bootstrap, {t2: 2})
    produce_sequence(a.bootstrap, t1, 2, "first", range(500))
    produce_sequence(b.bootstrap, t2, 2, "added", range(700))  # before it joins the stream
    name = uid("grow")
    admin.put_stream(stream_doc(name, {"east": (a.bootstrap, [t1])}))
    query = start_to_parquet(
        source(spark, coordinator.address, name, startingOffsets="latest"), tmp_path
    )
    eventually(lambda: query.lastProgress is not None, timeout_s=60)
    produce_sequence(a.bootstrap, t1, 2, "first", range(500, 800))
    eventually(
        lambda: sum(k.startswith("first:") for k in sink_keys(spark, tmp_path)) == 300,
        timeout_s=60,
    )
    # The stream grows: a new cluster with a topic that already has data.
    admin.put_stream(stream_doc(name, {"east": (a.bootstrap, [t1]), "west": (b.bootstrap, [t2])}))
    eventually(
        lambda: sum(k.startswith("added:") for k in sink_keys(spark, tmp_path)) == 700,
        timeout_s=60,
    )
    query.stop()
    keys = sink_keys(spark, tmp_path)
    assert_exactly_once([k for k in keys if k.startswith("added:")], {"added": 700})
    # startingOffsets=latest: records from before the query started were not read.
    assert not any(k.startswith("first:") and int(k.split(":")[1]) < 500 for k in keys)


def test_batch_read(
    any_spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
) -> None:
    spark = any_spark  # classic, then Spark Connect
    s = _two_by_two(kafka, admin, 1000)
    name, expected, topics = s.stream, s.expected, s.topics
    df = batch_source(spark, coordinator.address, name)
    keys = [r["k"] for r in df.selectExpr("cast(key as string) as k").collect()]
    assert_exactly_once(keys, expected)
    by_cluster = {r["cluster"]: r["count"] for r in df.groupBy("cluster").count().collect()}
    assert by_cluster == {"east": 2006, "west": 2006}  # 2 topics x (1000 + 3 fences)
    # endingOffsets as JSON: one split, up to offset 10.
    split = f"east/{topics['t1']}/0"
    limited = batch_source(
        spark,
        coordinator.address,
        name,
        startingOffsets=json.dumps({split: 5}),
        endingOffsets=json.dumps({split: 10}),
    ).where(f"cluster = 'east' and topic = '{topics['t1']}' and partition = 0")
    assert sorted(r["offset"] for r in limited.collect()) == [5, 6, 7, 8, 9]


def test_starting_positions_and_headers(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("pos")
    create_topics(a.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "old", range(100))
    time.sleep(0.05)  # a record time strictly after the old ones (append time, ms)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    from multikafka.devstack.feed import SequenceProducer, fence

    producer = SequenceProducer(a.bootstrap)
    producer.produce(topic, 1, "new", range(50), headers=True)
    producer.flush()
    fence(a.bootstrap, topic, 1)
    name = uid("pos")
    admin.put_stream(stream_doc(name, {"east": (a.bootstrap, [topic])}))

    by_time = tmp_path / "by-time"
    run_available_now(spark, coordinator.address, name, by_time, startingTimestamp=cut)
    keys = [k for k in sink_keys(spark, by_time) if not k.startswith("__fence__")]
    assert sorted(keys, key=lambda k: int(k.split(":")[1])) == [f"new:{i}" for i in range(50)]

    by_json = tmp_path / "by-json"
    run_available_now(
        spark,
        coordinator.address,
        name,
        by_json,
        startingOffsets=json.dumps({f"east/{topic}/0": 98}),
    )
    assert sorted(k for k in sink_keys(spark, by_json) if k.startswith("old"))[:2] == [
        "old:98",
        "old:99",
    ]

    headers = (
        batch_source(spark, coordinator.address, name, includeHeaders=True)
        .where("cast(key as string) = 'new:7'")
        .collect()
    )
    assert [(h["key"], bytes(h["value"])) for h in headers[0]["headers"]] == [("seq", b"7")]
    assert headers[0]["cluster"] == "east"
    assert headers[0]["timestampType"] == 0


def test_bad_options_fail_with_a_clear_message(
    spark: SparkSession, coordinator: CoordinatorThread
) -> None:
    from pyspark.errors import PySparkException

    reader = spark.read.format("multikafka").option("coordinator", coordinator.address)
    with pytest.raises(PySparkException, match="option stream: required"):
        reader.load().count()
    with pytest.raises(PySparkException, match="unknown option"):
        reader.option("stream", "x").option("startingOffset", "earliest").load().count()
