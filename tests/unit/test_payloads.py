"""Decoding a read's batches (multikafka.reader_agent._payloads): the three modes,
the declared schema (equal to what PySpark builds from the declared DDL),
and that other columns are kept as they are."""

from __future__ import annotations

import datetime as dt
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from multikafka.core.exceptions import MalformedRecordError, ValidationError
from multikafka.reader_agent import ReadTask
from multikafka.reader_agent._arrow import (
    HEADERS_TYPE,
    SCHEMA,
    TIMESTAMP_TYPE,
    Columns,
    record_batch,
)
from multikafka.reader_agent._payloads import MalformedCounts, Mode, PayloadDecoding

INTERNALS = (
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._payloads",
)


VALUE_SCHEMA = (
    "id long, name string, tags array<string>, inner struct<a: int, b: double>, ts timestamp"
)
VALUE_SPARK = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("tags", ArrayType(StringType())),
        StructField(
            "inner", StructType([StructField("a", IntegerType()), StructField("b", DoubleType())])
        ),
        StructField("ts", TimestampType()),
    ]
)


def spark_schema(key: object, value: object, *, headers: bool, corrupt: list[str]) -> StructType:
    """The Spark schema of a decoded read, built by hand (no JVM here)."""
    fields = [
        StructField("key", key),  # type: ignore[arg-type]
        StructField("value", value),  # type: ignore[arg-type]
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if headers:
        fields.append(
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            )
        )
    fields.append(StructField("cluster", StringType()))
    fields += [StructField(name, BinaryType()) for name in corrupt]
    return StructType(fields)


GOOD = b'{"id": 1, "name": "a", "tags": ["x"], "inner": {"a": 1, "b": 0.5}, "ts": "2024-01-01T00:00:00Z"}'
BAD = b'{"id": "hunter2"}'


def batch(
    values: list[bytes | None], keys: list[bytes | None] | None = None, *, headers: bool = False
) -> pa.RecordBatch:
    n = len(values)
    cols = Columns(
        key=pa.array(keys if keys is not None else [None] * n, pa.binary()),
        value=pa.array(values, pa.binary()),
        topic=pa.array(["orders"] * n, pa.string()),
        partition=pa.array([3] * n, pa.int32()),
        offset=pa.array(range(100, 100 + n), pa.int64()),
        timestamp=pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)] * n, TIMESTAMP_TYPE),
        timestamp_type=pa.array([0] * n, pa.int32()),
        headers=pa.array([[{"key": "h", "value": b"v"}]] * n, HEADERS_TYPE) if headers else None,
    )
    return record_batch(cols, "east", include_headers=headers)


def json_values(mode: str = "PERMISSIVE", **kw: str) -> PayloadDecoding:
    return PayloadDecoding.parse(value_format="json", value_schema=VALUE_SCHEMA, mode=mode, **kw)


@pytest.mark.parametrize("headers", [False, True])
def test_decoded_schema_equals_what_pyspark_expects(headers: bool) -> None:
    spec = json_values(key_format="string")
    expected = to_arrow_schema(
        spark_schema(
            StringType(), VALUE_SPARK, headers=headers, corrupt=["_corrupt_key", "_corrupt_value"]
        ),
        timezone="UTC",
    )
    assert spec.arrow_schema(include_headers=headers).equals(expected)
    got = spec.apply(batch([GOOD, BAD, None], [b"k", b"\xff", None], headers=headers), stream="s")
    assert got.schema.equals(expected)
    got.validate(full=True)


def test_declared_ddl_describes_the_decoded_schema() -> None:
    ddl = json_values().spark_ddl(include_headers=False)
    assert ddl == (
        "key binary, value struct<`id`: bigint, `name`: string, `tags`: array<string>, "
        "`inner`: struct<`a`: int, `b`: double>, `ts`: timestamp>, topic string, partition int, "
        "offset bigint, timestamp timestamp, timestampType int, cluster string, "
        "_corrupt_value binary"
    )


def test_raw_is_todays_schema_and_batch() -> None:
    spec = PayloadDecoding()
    raw = batch([GOOD, BAD])
    assert spec.apply(raw, stream="s") is raw
    assert spec.arrow_schema(include_headers=False).equals(SCHEMA)
    assert spec.spark_ddl(include_headers=False).startswith("key binary, value binary, topic")
    assert "_corrupt" not in spec.spark_ddl(include_headers=True)


def test_permissive_keeps_bad_records_with_their_bytes() -> None:
    raw = batch([GOOD, BAD, None, b""], headers=True)
    counts = MalformedCounts()
    got = json_values().apply(raw, stream="s", counts=counts)
    assert got.num_rows == 4
    values = got.column("value").to_pylist()
    assert values[0] is not None
    assert values[0]["id"] == 1
    assert values[0]["inner"]["b"] == 0.5
    assert values[1:] == [None, None, None]
    assert got.column("_corrupt_value").to_pylist() == [None, BAD, None, b""]
    assert "_corrupt_key" not in got.schema.names  # the key is not decoded
    assert counts == MalformedCounts(corrupt=2)
    # Every other column is the read's own.
    for name in ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers"):
        assert got.column(name).equals(raw.column(name)), name
    assert got.column("cluster").to_pylist() == ["east"] * 4


def test_dropmalformed_drops_and_counts() -> None:
    counts = MalformedCounts()
    got = json_values("dropmalformed").apply(
        batch([GOOD, BAD, None, GOOD, b"[]"]), stream="s", counts=counts
    )
    assert got.column("offset").to_pylist() == [100, 102, 103]
    assert got.column("value").to_pylist()[1] is None  # a tombstone is not malformed
    assert got.column("_corrupt_value").null_count == 3
    assert counts == MalformedCounts(dropped=2)


def test_dropmalformed_drops_a_record_whose_key_alone_is_bad() -> None:
    spec = json_values("DROPMALFORMED", key_format="string")
    got = spec.apply(batch([GOOD, GOOD], [b"ok", b"\xc3("]), stream="s")
    assert got.column("key").to_pylist() == ["ok"]


def test_failfast_names_stream_split_offset_and_problem_never_the_payload() -> None:
    counts = MalformedCounts()
    with pytest.raises(MalformedRecordError) as info:
        json_values("FAILFAST").apply(batch([GOOD, GOOD, BAD]), stream="orders", counts=counts)
    message = str(info.value)
    assert "stream orders, split east/orders/3, offset 102" in message
    assert "the value is malformed: field /id is a JSON string" in message
    assert "hunter2" not in message
    assert counts == MalformedCounts(failed=1)


def test_failfast_on_a_bad_key() -> None:
    spec = json_values("FAILFAST", key_format="json", key_schema="k string")
    with pytest.raises(MalformedRecordError, match=r"offset 100: the key is malformed: an empty"):
        spec.apply(batch([GOOD], [b""]), stream="s")


def test_failfast_passes_good_batches() -> None:
    got = json_values("FAILFAST").apply(batch([GOOD, None]), stream="s")
    assert got.column("_corrupt_value").null_count == 2


def test_key_and_value_decoded_independently() -> None:
    spec = PayloadDecoding.parse(key_format="json", key_schema="user string", value_format="string")
    got = spec.apply(batch([b"v1", b"\xff", None], [b'{"user": "u"}', b"{}", b"x"]), stream="s")
    assert got.column("key").to_pylist() == [{"user": "u"}, {"user": None}, None]
    assert got.column("value").to_pylist() == ["v1", None, None]
    assert got.column("_corrupt_key").to_pylist() == [None, None, b"x"]
    assert got.column("_corrupt_value").to_pylist() == [None, b"\xff", None]


def test_empty_batch() -> None:
    got = json_values("DROPMALFORMED").apply(batch([]), stream="s")
    assert got.num_rows == 0
    assert got.schema.equals(json_values().arrow_schema(include_headers=False))


def test_spec_is_checked_when_parsed() -> None:
    with pytest.raises(ValidationError, match="option mode: must be one of PERMISSIVE"):
        PayloadDecoding.parse(mode="lenient")
    with pytest.raises(ValidationError, match="option keySchema"):
        PayloadDecoding.parse(key_format="json")
    assert PayloadDecoding.parse(mode=" failFast ").mode is Mode.FAILFAST


def test_spec_travels_in_the_task() -> None:
    task = ReadTask(
        coordinator=None,
        stream="s",
        query_id="q",
        generation=1,
        ranges=(),
        clusters={},
        decoding=json_values("DROPMALFORMED"),
    )
    back = pickle.loads(pickle.dumps(task))
    assert back.decoding == task.decoding
    assert back.decoding.apply(batch([GOOD, BAD]), stream="s").num_rows == 1
