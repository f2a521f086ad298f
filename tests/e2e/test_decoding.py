"""JSON values decoded in real Spark queries over a real tansu broker, in
each mode: PERMISSIVE (bad records kept, bytes in ``_corrupt_value``),
DROPMALFORMED (dropped, and counted at the coordinator), FAILFAST (the query
fails naming the offset). And Spark's own DDL parser agrees with ours."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql.pandas import types as pandas_types
from pyspark.sql.types import StructType

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import _spark_ddl as spark_ddl
from multikafka.reader_agent._payloads import PayloadDecoding
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import batch_source, run_available_now
from tests.helpers import eventually, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTERNALS = (
    "multikafka.reader_agent._payloads",
    "multikafka.reader_agent._spark_ddl",
)


pytestmark = [pytest.mark.integration, pytest.mark.spark]

VALUE_SCHEMA = "id long, name string, tags array<string>, inner struct<a: int, b: double>"
N = 30
#: offset -> payload that does not decode (a wrong type; not JSON at all).
BAD = {7: b'{"id": "secret-7"}', 19: b"password=hunter2"}
TOMBSTONE = 12


def arrow_schema(schema: StructType) -> pa.Schema:
    """PySpark's Arrow schema of ``schema``, timestamps in UTC (PySpark 4.0
    has no ``timezone`` argument: it always uses UTC)."""
    if "timezone" in inspect.signature(pandas_types.to_arrow_schema).parameters:
        return pandas_types.to_arrow_schema(schema, timezone="UTC")
    return pandas_types.to_arrow_schema(schema)


def payload(offset: int) -> bytes | None:
    if offset in BAD:
        return BAD[offset]
    if offset == TOMBSTONE:
        return None
    record = {"id": offset, "name": f"n{offset}", "tags": ["a"], "inner": {"a": 1, "b": 0.5}}
    return json.dumps(record, indent=1).encode()  # newlines in a payload are whitespace


def json_stream(kafka: KafkaClusters, admin: AdminClient) -> tuple[str, str]:
    """A stream of one partition holding ``N`` records at offsets 0..N-1."""
    (a,) = kafka.shared(1)
    topic = uid("json")
    create_topics(a.bootstrap, {topic: 1})
    # One record per produce batch: tansu's watermark is then exact.
    producer = Producer({"bootstrap.servers": a.bootstrap, "batch.num.messages": 1})
    for offset in range(N):
        producer.produce(topic, key=f"k{offset}".encode(), value=payload(offset), partition=0)
        producer.flush(10)
    name = uid("decode")
    admin.put_stream(stream_doc(name, {"east": (a.bootstrap, [topic])}))
    return name, topic


def options(mode: str) -> dict[str, object]:
    return {
        "startingOffsets": "earliest",
        "valueFormat": "json",
        "valueSchema": VALUE_SCHEMA,
        "keyFormat": "string",
        "mode": mode,
    }


def test_permissive_keeps_bad_records_with_their_bytes(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    name, _ = json_stream(kafka, admin)
    run_available_now(spark, coordinator.address, name, tmp_path, **options("permissive"))
    rows = {
        r["offset"]: r
        for r in spark.read.parquet(str(tmp_path / "sink"))
        .selectExpr("offset", "key", "value.id as id", "value.inner.b as b", "_corrupt_value")
        .collect()
    }
    assert sorted(rows) == list(range(N))
    for offset, row in rows.items():
        assert row["key"] == f"k{offset}"
        if offset in BAD:
            assert row["id"] is None
            assert bytes(row["_corrupt_value"]) == BAD[offset]
        elif offset == TOMBSTONE:
            assert row["id"] is None
            assert row["_corrupt_value"] is None  # a tombstone is not malformed
        else:
            assert row["id"] == offset
            assert row["b"] == 0.5
            assert row["_corrupt_value"] is None


def test_dropmalformed_drops_and_counts_at_the_coordinator(
    spark: SparkSession, coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    name, _ = json_stream(kafka, admin)
    df = batch_source(spark, coordinator.address, name, **options("DROPMALFORMED"))
    rows = df.selectExpr("offset", "value.name as name").collect()
    assert sorted(r["offset"] for r in rows) == [o for o in range(N) if o not in BAD]
    assert {r["offset"]: r["name"] for r in rows}[3] == "n3"
    coord = coordinator.coordinator
    assert coord is not None
    # The agents in Spark's Python workers push their counts in heartbeats.
    eventually(
        lambda: (
            coord.metrics.registry.get_sample_value(
                "multikafka_agent_malformed_records_total",
                {"stream": name, "cluster": "east", "mode": "DROPMALFORMED"},
            )
            == len(BAD)
        ),
        timeout_s=30,
    )


def test_failfast_fails_the_query_naming_the_offset(
    spark: SparkSession, coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    name, topic = json_stream(kafka, admin)
    df = batch_source(spark, coordinator.address, name, **options("FAILFAST"))
    with pytest.raises(Exception) as info:
        df.collect()
    message = str(info.value)
    # The range may be cut in two tasks: the first bad record of either fails it.
    why = {7: "field /id is a JSON string where the schema wants a number", 19: "not a JSON object"}
    named = [
        o
        for o in BAD
        if f"stream {name}, split east/{topic}/0, offset {o}: the value is malformed: {why[o]}"
        in message
    ]
    assert named, message
    assert "secret-7" not in message
    assert "hunter2" not in message
    assert "MalformedRecordError" in message


@pytest.mark.parametrize(
    "schema",
    [
        VALUE_SCHEMA,
        "a tinyint, b smallint, c int, d bigint, e float, f double, g decimal(12,3), "
        "h string, i boolean, j date, k timestamp, l array<struct<m: map<string, int>>>",
        "`odd name` struct<`x``y`: array<array<long>>>, `select` int, n timestamp_ntz",
    ],
)
def test_sparks_ddl_parser_agrees_with_ours(spark: SparkSession, schema: str) -> None:
    """Spark's parser (in the JVM) and PySpark's Arrow conversion give the
    schema ours gives, for the DDL as written and as our writer spells it."""
    ours = spark_ddl.parse_schema(schema)
    assert arrow_schema(StructType.fromDDL(schema)).equals(ours)
    written = spark_ddl.schema_ddl(ours)
    assert arrow_schema(StructType.fromDDL(written)).equals(ours)


@pytest.mark.parametrize("headers", [False, True])
def test_declared_schema_is_the_schema_of_decoded_batches(
    spark: SparkSession, headers: bool
) -> None:
    """PySpark refuses batches whose schema is not that of the declared DDL."""
    spec = PayloadDecoding.parse(
        value_format="json", value_schema=VALUE_SCHEMA, key_format="string"
    )
    declared = StructType.fromDDL(spec.spark_ddl(include_headers=headers))
    assert arrow_schema(declared).equals(spec.arrow_schema(include_headers=headers))
