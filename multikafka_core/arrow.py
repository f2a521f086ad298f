"""The Arrow form of a read, in one place: the schema of Spark's Kafka source
plus ``cluster``, its Spark DDL, and decoding Kafka messages into it column by
column.

PySpark's Python data source refuses a batch whose schema does not equal
``to_arrow_schema(<declared DDL>, timezone="UTC")``, so the DDL, the Arrow
schema and the arrays built here must agree (``tests/unit/test_arrow_schema.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

#: Spark's Kafka source types of ``timestamp`` and ``headers``.
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

_BASE = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema([*_BASE, pa.field("cluster", pa.string())])
SCHEMA_WITH_HEADERS = pa.schema(
    [*_BASE, pa.field("headers", HEADERS_TYPE), pa.field("cluster", pa.string())]
)

#: The same schemas as Spark DDL.
_BASE_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
SPARK_DDL = f"{_BASE_DDL}, cluster string"
SPARK_DDL_WITH_HEADERS = (
    f"{_BASE_DDL}, headers array<struct<key: string, value: binary>>, cluster string"
)


class Message(Protocol):
    """What decoding reads of a ``confluent_kafka.Message`` (which tests cannot build)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...


#: Distinct ``(topic, partition)`` pairs of a batch, and per record the index
#: of its pair in that list.
PartitionIndex = tuple[list[tuple[str, int]], np.ndarray]


@dataclass
class Columns:
    """Decoded records of one batch, column-wise (Spark's Kafka schema)."""

    key: pa.Array
    value: pa.Array
    topic: pa.Array
    partition: pa.Array
    offset: pa.Array
    timestamp: pa.Array
    timestamp_type: pa.Array
    headers: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def filter(self, keep: np.ndarray) -> Columns:
        """The records whose entry in the boolean mask ``keep`` is true."""
        mask = pa.array(keep)
        return Columns(
            key=self.key.filter(mask),
            value=self.value.filter(mask),
            topic=self.topic.filter(mask),
            partition=self.partition.filter(mask),
            offset=self.offset.filter(mask),
            timestamp=self.timestamp.filter(mask),
            timestamp_type=self.timestamp_type.filter(mask),
            headers=self.headers.filter(mask) if self.headers is not None else None,
        )

    def partitions(self) -> PartitionIndex:
        """The batch's distinct partitions and each record's partition, computed
        on the arrays (no per-record Python work)."""
        topics = self.topic.dictionary_encode()
        names = topics.dictionary.to_pylist()
        keys = (topics.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32) | (
            self.partition.to_numpy(zero_copy_only=False).astype(np.int64)
        )
        unique, codes = np.unique(keys, return_inverse=True)
        pairs = [(str(names[int(k) >> 32]), int(k) & 0xFFFFFFFF) for k in unique]
        return pairs, codes

    def last_per_partition(self, index: PartitionIndex) -> dict[tuple[str, int], tuple[int, int]]:
        """``(offset, record time in ms)`` of the last record of each partition."""
        pairs, codes = index
        if not len(codes):
            return {}
        # The first occurrence of each code in the reversed batch is its last record.
        present, first_rev = np.unique(codes[::-1], return_index=True)
        last = len(codes) - 1 - first_rev
        offsets = self.offset.to_numpy(zero_copy_only=False)
        times_us = self.timestamp.cast(pa.int64()).to_numpy(zero_copy_only=False)
        return {
            pairs[int(c)]: (int(offsets[i]), int(times_us[i]) // 1000)
            for c, i in zip(present, last, strict=True)
        }


def decode(msgs: Sequence[Message], *, include_headers: bool) -> Columns:
    """Kafka messages (without errors) as Arrow columns: one pass per field."""
    # (type, time) per record as an (n, 2) array.
    ts = np.array([m.timestamp() for m in msgs], np.int64).reshape(-1, 2)
    return Columns(
        key=pa.array([m.key() for m in msgs], pa.binary()),
        value=pa.array([m.value() for m in msgs], pa.binary()),
        topic=pa.array([m.topic() for m in msgs], pa.string()),
        partition=pa.array([m.partition() for m in msgs], pa.int32()),
        offset=pa.array(np.array([m.offset() for m in msgs], np.int64)),
        timestamp=pa.array(ts[:, 1] * 1000).cast(TIMESTAMP_TYPE),
        # librdkafka: 0 none, 1 create, 2 append; Kafka/Spark: -1, 0, 1.
        timestamp_type=pa.array((ts[:, 0] - 1).astype(np.int32)),
        headers=pa.array([m.headers() for m in msgs], HEADERS_TYPE) if include_headers else None,
    )


def record_batch(cols: Columns, cluster: str, *, include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch from decoded columns; the cluster column is built
    without touching individual records."""
    n = len(cols)
    cluster_col = pa.array([cluster], pa.string()).take(pa.array(np.zeros(n, np.int32)))
    arrays = [
        cols.key,
        cols.value,
        cols.topic,
        cols.partition,
        cols.offset,
        cols.timestamp,
        cols.timestamp_type,
    ]
    if include_headers:
        if cols.headers is None:
            raise ValueError("headers were not decoded")
        return pa.RecordBatch.from_arrays(
            [*arrays, cols.headers, cluster_col], schema=SCHEMA_WITH_HEADERS
        )
    return pa.RecordBatch.from_arrays([*arrays, cluster_col], schema=SCHEMA)
