"""The reader agent: per-process readers of exact Kafka offset ranges, one
sub-reader (consumer) per cluster, kept in line with the coordinator's
reconcile events. Spark executors reach it through :func:`get_agent`.

The modules named ``_x`` are internal; the names below are the API, and
:mod:`.decoders` is where payload formats are registered."""

from multikafka.reader_agent._agent import ReaderAgent, get_agent
from multikafka.reader_agent._arrow import (
    SCHEMA,
    SCHEMA_WITH_HEADERS,
    SPARK_DDL,
    SPARK_DDL_WITH_HEADERS,
    record_batch,
)
from multikafka.reader_agent._options import ReadOptions
from multikafka.reader_agent._task import ReadTask

__all__ = [
    "SCHEMA",
    "SCHEMA_WITH_HEADERS",
    "SPARK_DDL",
    "SPARK_DDL_WITH_HEADERS",
    "ReadOptions",
    "ReadTask",
    "ReaderAgent",
    "get_agent",
    "record_batch",
]
