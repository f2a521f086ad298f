"""Pub-sub providers: everything specific to one messaging system sits behind
the small interfaces in :mod:`multikafka_core.providers.base` (partition counts,
offsets by position or time, reading a range into Arrow columns). Kafka is the
one implementation today (:mod:`multikafka_core.providers.kafka`)."""

from multikafka_core.providers.base import (
    MetadataClient,
    OffsetQuery,
    RangeReader,
    ReadOutcome,
    ServesStreams,
    TopicPartitionRange,
)

__all__ = [
    "MetadataClient",
    "OffsetQuery",
    "RangeReader",
    "ReadOutcome",
    "ServesStreams",
    "TopicPartitionRange",
]
