"""Pub-sub providers: everything specific to one messaging system sits behind
the small interfaces in :mod:`multikafka.providers.base` (partition counts,
offsets by position or time, reading a range, decoding records). Kafka is the
one implementation today (:mod:`multikafka.providers.kafka`)."""

from multikafka.providers.base import (
    Columns,
    MetadataClient,
    OffsetQuery,
    RangeReader,
    ReadOutcome,
    TopicPartitionRange,
)

__all__ = [
    "Columns",
    "MetadataClient",
    "OffsetQuery",
    "RangeReader",
    "ReadOutcome",
    "TopicPartitionRange",
]
