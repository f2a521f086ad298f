"""The ``multikafka`` format without code, and over Spark Connect.

PySpark finds the source by itself (``pyspark_multikafka``), so a new
session, classic or Spark Connect, reads a stream with no import and no
``register`` call; ``register`` still works in both, Connect included (the
session's parallelism from its configuration). The reads that matter most
also run over Spark Connect in their own files (exactly once across a
restart, a batch read, a live failover, TLS with a reader token: the
``any_spark`` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.spark.compat import SPARK_VERSION
from multikafka.spark.source import MultiKafkaDataSource
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import batch_source, run_available_now, sink_keys
from tests.helpers import assert_exactly_once, produce_sequence, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _stream(admin: AdminClient, kafka: KafkaClusters, records: int) -> str:
    a, b = kafka.shared(2)
    topic = uid("nc")
    for cid, c in (("east", a), ("west", b)):
        create_topics(c.bootstrap, {topic: 2})
        produce_sequence(c.bootstrap, topic, 2, cid, range(records))
    name = uid("nc")
    admin.put_stream(
        stream_doc(name, {"east": (a.bootstrap, [topic]), "west": (b.bootstrap, [topic])})
    )
    return name


def test_a_new_classic_session_finds_the_format_by_itself(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """``spark.newSession()`` shares the Spark but none of the session's
    registrations: the format comes from PySpark's discovery."""
    name = _stream(admin, kafka, 300)
    fresh = spark.newSession()
    query = run_available_now(
        fresh, coordinator.address, name, tmp_path, startingOffsets="earliest"
    )
    assert_exactly_once(sink_keys(fresh, tmp_path), {"east": 300, "west": 300})
    assert query.exception() is None


def test_a_spark_connect_session_reads_with_no_code(
    connect_spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    name = _stream(admin, kafka, 300)
    run_available_now(
        connect_spark, coordinator.address, name, tmp_path, startingOffsets="earliest"
    )
    assert_exactly_once(sink_keys(connect_spark, tmp_path), {"east": 300, "west": 300})


def test_register_works_in_a_spark_connect_session(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
) -> None:
    """A Connect session has no SparkContext: ``register`` takes the
    parallelism from its configuration (``local[2]``) and the format it
    registers reads."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    import multikafka.spark

    port = spark.conf.get("spark.connect.grpc.binding.port")
    session: Any = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    try:
        registered = multikafka.spark.register(session)
        if SPARK_VERSION.startswith("4.0."):  # keeps the source it discovered, with a warning
            assert registered is MultiKafkaDataSource
        else:
            assert registered.default_parallelism == 2
        name = _stream(admin, kafka, 200)
        keys = [
            r["k"]
            for r in batch_source(session, coordinator.address, name)
            .selectExpr("cast(key as string) as k")
            .collect()
        ]
        assert_exactly_once(keys, {"east": 200, "west": 200})
    finally:
        session.stop()
