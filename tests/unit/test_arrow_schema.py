"""Arrow batches of the reader agent match, exactly, the schema PySpark expects.

PySpark's Python data source reader refuses a ``RecordBatch`` whose schema does
not ``equals`` ``to_arrow_schema(<declared schema>, timezone="UTC")``, so the
declared DDL, the Arrow schemas and the batches must all agree.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from confluent_kafka import Message
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from multikafka.reader_agent._arrow import (
    HEADERS_TYPE,
    SCHEMA,
    SCHEMA_WITH_HEADERS,
    SPARK_DDL,
    SPARK_DDL_WITH_HEADERS,
    TIMESTAMP_TYPE,
    Columns,
    convert,
    record_batch,
)

INTERNALS = ("multikafka.reader_agent._arrow",)


# ``StructType.fromDDL`` needs a JVM; the Spark schemas are built by hand and
# checked against the DDL text below.
_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
SPARK_SCHEMA = StructType([*_BASE_FIELDS, StructField("cluster", StringType())])
SPARK_SCHEMA_WITH_HEADERS = StructType(
    [*_BASE_FIELDS, StructField("headers", _HEADERS), StructField("cluster", StringType())]
)

#: DDL spellings whose simpleString() differs.
_DDL_ALIASES = {"long": "bigint", "integer": "int"}


def ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of a top-level DDL string, types normalised like
    ``DataType.simpleString()``."""
    fields, depth, cur = [], 0, ""
    for ch in ddl + ",":
        if ch == "," and depth == 0:
            name, type_ = cur.strip().split(None, 1)
            type_ = type_.replace(" ", "")
            fields.append((name, _DDL_ALIASES.get(type_, type_)))
            cur = ""
            continue
        depth += ch == "<"
        depth -= ch == ">"
        cur += ch
    return fields


def spark_fields(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


@pytest.mark.parametrize(
    ("ddl", "spark"),
    [(SPARK_DDL, SPARK_SCHEMA), (SPARK_DDL_WITH_HEADERS, SPARK_SCHEMA_WITH_HEADERS)],
)
def test_ddl_describes_the_spark_schema(ddl: str, spark: StructType) -> None:
    assert ddl_fields(ddl) == spark_fields(spark)
    assert all(f.nullable for f in spark.fields)


def test_ddl_parser_sees_types() -> None:
    assert ddl_fields("a long, b array<struct<k: string, v: binary>>") == [
        ("a", "bigint"),
        ("b", "array<struct<k:string,v:binary>>"),
    ]


@pytest.mark.parametrize(
    ("arrow", "spark"),
    [(SCHEMA, SPARK_SCHEMA), (SCHEMA_WITH_HEADERS, SPARK_SCHEMA_WITH_HEADERS)],
)
def test_arrow_schema_equals_what_pyspark_expects(arrow: pa.Schema, spark: StructType) -> None:
    expected = to_arrow_schema(spark, timezone="UTC")
    assert expected.equals(arrow)
    assert arrow.names == spark.fieldNames()


def test_schema_column_order() -> None:
    base = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert SCHEMA.names == [*base, "cluster"]
    assert SCHEMA_WITH_HEADERS.names == [*base, "headers", "cluster"]


def test_timestamps_are_utc_microseconds() -> None:
    assert SCHEMA.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert (
        to_arrow_schema(StructType([StructField("t", TimestampType())]), timezone="UTC")
        .field("t")
        .type.equals(TIMESTAMP_TYPE)
    )


def columns(n: int = 3, *, headers: bool = False) -> Columns:
    ts = [
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in range(n)
    ]
    return Columns(
        key=pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
        value=pa.array([None if i == 1 else f"v{i}".encode() for i in range(n)], pa.binary()),
        topic=pa.array(["orders"] * n, pa.string()),
        partition=pa.array([2] * n, pa.int32()),
        offset=pa.array([10 + i for i in range(n)], pa.int64()),
        timestamp=pa.array(ts, TIMESTAMP_TYPE),
        timestamp_type=pa.array([0] * n, pa.int32()),
        headers=pa.array([[{"key": "h", "value": b"x"}]] * n, HEADERS_TYPE) if headers else None,
    )


def test_record_batch_without_headers() -> None:
    batch = record_batch(columns(), "east", include_headers=False)
    assert batch.schema.equals(SCHEMA)
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(batch.schema)
    assert batch.num_rows == 3
    assert batch.column("cluster").to_pylist() == ["east"] * 3
    assert batch.column("offset").to_pylist() == [10, 11, 12]
    assert batch.column("value").to_pylist() == [b"v0", None, b"v2"]
    assert batch.column("partition").to_pylist() == [2, 2, 2]
    assert batch.schema.names[-1] == "cluster"


def test_record_batch_ignores_decoded_headers_when_not_asked() -> None:
    batch = record_batch(columns(headers=True), "east", include_headers=False)
    assert batch.schema.equals(SCHEMA)


def test_record_batch_with_headers() -> None:
    batch = record_batch(columns(headers=True), "west", include_headers=True)
    assert batch.schema.equals(SCHEMA_WITH_HEADERS)
    assert to_arrow_schema(SPARK_SCHEMA_WITH_HEADERS, timezone="UTC").equals(batch.schema)
    assert batch.schema.names[-2:] == ["headers", "cluster"]
    assert batch.column("cluster").to_pylist() == ["west"] * 3
    assert batch.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]


def test_record_batch_with_headers_requires_headers() -> None:
    with pytest.raises(ValueError, match="headers"):
        record_batch(columns(headers=False), "east", include_headers=True)


def test_record_batch_of_no_rows() -> None:
    batch = record_batch(columns(0), "east", include_headers=False)
    assert batch.num_rows == 0
    assert batch.schema.equals(SCHEMA)


def test_record_batch_always_has_the_declared_schema() -> None:
    cols = columns()
    cols.offset = pa.array([10, 11, 12], pa.int32())  # castable: the batch still says int64
    batch = record_batch(cols, "east", include_headers=False)
    assert batch.schema.equals(SCHEMA)
    assert batch.column("offset").type == pa.int64()
    batch.validate(full=True)


def test_record_batch_of_many_rows() -> None:
    batch = record_batch(columns(5000), "east", include_headers=False)
    assert batch.num_rows == 5000
    assert batch.column("cluster").unique().to_pylist() == ["east"]
    assert batch.column("cluster").null_count == 0


@pytest.mark.parametrize("converter", ["python", "c"])
@pytest.mark.parametrize(
    ("headers", "spark"), [(False, SPARK_SCHEMA), (True, SPARK_SCHEMA_WITH_HEADERS)]
)
def test_converted_batches_have_the_schema_pyspark_expects(
    converter: str, headers: bool, spark: StructType
) -> None:
    msgs = [
        Message(topic="t", partition=i, offset=i, key=None, value=b"v", timestamp=(1, 1_000 * i))
        for i in range(3)
    ]
    batch = record_batch(
        convert(msgs, include_headers=headers, converter=converter), "east", include_headers=headers
    )
    assert to_arrow_schema(spark, timezone="UTC").equals(batch.schema)
    batch.validate(full=True)
    assert batch.column("timestamp").to_pylist()[2] == dt.datetime(
        1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc
    )
