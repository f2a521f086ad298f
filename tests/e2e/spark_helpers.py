"""Running multikafka queries in the session's SparkSession."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from multikafka.reader_agent import SPARK_DDL_WITH_HEADERS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.streaming import DataStreamReader
    from pyspark.sql.streaming.query import StreamingQuery

R = TypeVar("R", "DataFrameReader", "DataStreamReader")


def _multikafka(reader: R, coordinator: str, stream: str, options: dict[str, object]) -> R:
    reader = reader.format("multikafka").option("coordinator", coordinator).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    return reader


def source(spark: SparkSession, coordinator: str, stream: str, **options: object) -> DataFrame:
    """A streaming DataFrame over ``stream``."""
    return _multikafka(spark.readStream, coordinator, stream, options).load()


def batch_source(
    spark: SparkSession, coordinator: str, stream: str, **options: object
) -> DataFrame:
    """A batch DataFrame over ``stream``."""
    return _multikafka(spark.read, coordinator, stream, options).load()


def start_to_parquet(
    df: DataFrame, out: Path, *, available_now: bool = False, interval: str = "200 milliseconds"
) -> StreamingQuery:
    writer = (
        df.writeStream.format("parquet")
        .option("path", str(out / "sink"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=interval)
    )
    return writer.start()


def run_available_now(
    spark: SparkSession, coordinator: str, stream: str, out: Path, **options: object
) -> StreamingQuery:
    query = start_to_parquet(source(spark, coordinator, stream, **options), out, available_now=True)
    query.awaitTermination(300)
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def sink_rows(spark: SparkSession, out: Path) -> list[tuple[str, str, str, int, int]]:
    """(cluster, key, topic, partition, offset) of every row in the sink."""
    sink = out / "sink"
    if not (sink / "_spark_metadata").exists():
        return []
    # With the schema given, a sink whose metadata log is still empty reads
    # as empty instead of failing schema inference.
    rows = (
        spark.read.schema(SPARK_DDL_WITH_HEADERS)
        .parquet(str(sink))
        .selectExpr("cluster", "cast(key as string) as k", "topic", "partition", "offset")
        .collect()
    )
    return [(r["cluster"], r["k"], r["topic"], r["partition"], r["offset"]) for r in rows]


def sink_keys(spark: SparkSession, out: Path) -> list[str]:
    return [k for _, k, _, _, _ in sink_rows(spark, out)]
