"""Micro-batches sized by the cores Spark has, through the source PySpark
discovers (no ``register``): the first micro-batch's tasks tell the
coordinator Spark's task slots (``local[2]``: 2), so the query's next
micro-batches are about two tasks each, not one per split."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import sink_keys, source, start_to_parquet
from tests.helpers import assert_exactly_once, eventually, produce_sequence, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 4
RECORDS = 400  # per cluster, and a fence per partition


def tasks_per_batch(spark: SparkSession, run_id: str) -> list[int]:
    """The tasks of each job of a query run (its job group is the run id):
    one job per micro-batch with data."""
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(run_id)):
        info = tracker.getJobInfo(job)
        assert info is not None
        out.append(sum(s.numTasks for s in map(tracker.getStageInfo, info.stageIds) if s))
    return out


def test_the_discovered_source_plans_about_as_many_tasks_as_cores(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    a, b = kafka.shared(2)
    topic = uid("slots")
    bootstraps = {"east": a.bootstrap, "west": b.bootstrap}
    for cid, bootstrap in bootstraps.items():
        create_topics(bootstrap, {topic: PARTITIONS})
        produce_sequence(bootstrap, topic, PARTITIONS, cid, range(RECORDS))
    name = uid("slots")
    admin.put_stream(stream_doc(name, {cid: (bs, [topic]) for cid, bs in bootstraps.items()}))
    total = 2 * (RECORDS + PARTITIONS)

    # A new session has none of the test session's registrations (which pass
    # the parallelism): the format is PySpark's discovery, as users run it.
    fresh = spark.newSession()
    df = source(
        fresh, coordinator.address, name, startingOffsets="earliest", maxOffsetsPerTrigger=160
    )
    query = start_to_parquet(df, tmp_path, interval="100 milliseconds")
    try:
        eventually(lambda: len(sink_keys(fresh, tmp_path)) == total, timeout_s=120)
    finally:
        query.stop()
    assert_exactly_once(sink_keys(fresh, tmp_path), {"east": RECORDS, "west": RECORDS})

    tasks = tasks_per_batch(fresh, str(query.runId))
    assert len(tasks) >= 5, tasks
    # The first micro-batch is planned before anything was reported: its
    # 160 records over 8 splits share one task (not 8); the tasks of every
    # micro-batch then tell Spark's 2 slots, so the next ones get 2 (the
    # report travels while Spark commits: the second batch may still be
    # planned before it arrives).
    assert tasks[0] == 1, tasks
    assert tasks[2:] == [2] * (len(tasks) - 2), tasks
