"""Arrow record batches in the schema of Spark's Kafka source, plus ``cluster``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from multikafka.providers import Columns
from multikafka.providers.kafka import HEADERS_TYPE, TIMESTAMP_TYPE

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
