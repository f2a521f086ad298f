"""The reader agent: per-process readers of exact Kafka offset ranges, one
sub-reader (consumer) per cluster, kept in line with the coordinator's
reconcile events. Spark executors reach it through :func:`get_agent`."""

from multikafka.reader_agent.agent import ReaderAgent, get_agent
from multikafka.reader_agent.arrow import (
    SCHEMA,
    SCHEMA_WITH_HEADERS,
    SPARK_DDL,
    SPARK_DDL_WITH_HEADERS,
    record_batch,
)
from multikafka.reader_agent.task import ReadTask

__all__ = [
    "SCHEMA",
    "SCHEMA_WITH_HEADERS",
    "SPARK_DDL",
    "SPARK_DDL_WITH_HEADERS",
    "ReadTask",
    "ReaderAgent",
    "get_agent",
    "record_batch",
]
