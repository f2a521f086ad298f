"""A Spark query over a topic written by a transactional producer (real
etcd, tansu, Spark): while a transaction is open the query goes on reading
everything else (its readers read committed records, librdkafka's default,
and the coordinator plans them to the last stable offset), and once the
transaction commits its records arrive, each exactly once.

tansu hands out the records of aborted transactions to readers of committed
records, so aborts are not tested here (``docs/architecture.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import sink_keys, source, start_to_parquet
from tests.helpers import (
    eventually,
    open_transaction,
    produce_each,
    stream_doc,
    transactional_producer,
    uid,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_an_open_transaction_holds_back_only_its_own_records(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("tx")
    create_topics(a.bootstrap, {topic: 2})
    tx = transactional_producer(a.bootstrap)
    plain = Producer({"bootstrap.servers": a.bootstrap, "batch.num.messages": 1})

    def records(keys: list[str]) -> None:
        produce_each(plain, topic, keys, partition=1)

    open_transaction(tx, topic, ["c0", "c1", "c2"])
    tx.commit_transaction(15)
    records(["p0", "p1"])
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    query = start_to_parquet(
        source(spark, coordinator.address, name, startingOffsets="earliest"), tmp_path
    )
    try:
        eventually(
            lambda: sorted(sink_keys(spark, tmp_path)) == ["c0", "c1", "c2", "p0", "p1"],
            timeout_s=60,
        )
        open_transaction(tx, topic, ["o0", "o1"])  # its records wait
        records(["p2", "p3"])
        # Planned to the high watermark, the partition's range waited for the
        # transaction, and with it the whole micro-batch: p2 and p3 with it.
        eventually(lambda: {"p2", "p3"} <= set(sink_keys(spark, tmp_path)), timeout_s=60)
        assert not {"o0", "o1"} & set(sink_keys(spark, tmp_path))
        tx.commit_transaction(15)
        records(["p4"])
        want = ["c0", "c1", "c2", "o0", "o1", "p0", "p1", "p2", "p3", "p4"]
        eventually(lambda: sorted(sink_keys(spark, tmp_path)) == want, timeout_s=60)
        assert query.exception() is None
    finally:
        query.stop()
