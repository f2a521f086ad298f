"""A sub-reader: the agent's reader of one cluster of one stream (one consumer).

It is created on first use, reused across micro-batches, restarted when the
cluster's connection settings change, and closed when the cluster is removed,
failed or left idle. A close requested while a task uses it happens when the
task releases it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from multikafka.core._recent import Recent
from multikafka.core.kafka_log import ServesStreams
from multikafka.core.logs import logger_of
from multikafka.core.model import Connection
from multikafka.reader_agent._overrides import Overrides, with_overrides
from multikafka.reader_agent._range_consumer import KafkaRangeConsumer, RangeConsumer

logger = logger_of(__name__)

RangeConsumerFactory = Callable[[Connection], RangeConsumer]

#: How long a split read counts as one the agent reads (its assignments).
RECENT_S = 30.0


def kafka_range_consumer(connection: Connection) -> RangeConsumer:
    return KafkaRangeConsumer(connection, client_id=f"multikafka-agent-{connection.cluster}")


@dataclass
class SubReaderStats:
    """Counters of one (stream, cluster); they outlive restarts of its
    sub-reader and are dropped with the cluster."""

    records_read: int = 0
    restarts: int = 0
    abandoned_ranges: int = 0
    #: Records that did not decode: dropped (DROPMALFORMED), kept in a
    #: ``_corrupt_*`` column (PERMISSIVE), reads failed (FAILFAST).
    malformed_records: int = 0
    corrupt_records: int = 0
    malformed_failures: int = 0
    #: Splits read lately: a micro-batch's tasks each hold some of them.
    splits: Recent = field(default_factory=lambda: Recent(RECENT_S))


#: Which sub-reader serves a task: (stream, cluster) for queries without
#: librdkafka overrides, (stream, cluster, fingerprint of the overrides) for
#: those with: queries of one process that set different ones each get a
#: consumer of their own and never restart each other's.
Slot = tuple[str, ...]


class SubReader:
    def __init__(
        self,
        stream: str,
        connection: Connection,
        factory: RangeConsumerFactory,
        overrides: Overrides | None = None,
    ) -> None:
        self.stream = stream
        self.cluster = connection.cluster
        #: The cluster's connection as the coordinator knows it (reconcile
        #: compares it); the consumer also gets the query's overrides.
        self.fingerprint = connection.fingerprint
        self.variant = overrides.fingerprint if overrides else ""
        self.consumer = factory(with_overrides(connection, overrides or {}))
        if isinstance(self.consumer, ServesStreams):
            self.consumer.set_log_context([(stream, connection.cluster)])
        self.in_use = 0
        self.last_used = time.monotonic()
        self.close_pending = False
        self.closed = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.stream, self.cluster)

    @property
    def slot(self) -> Slot:
        return slot_of(self.stream, self.cluster, self.variant)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()
            logger.debug(
                "sub-reader closed", extra={"stream": self.stream, "cluster": self.cluster}
            )


def slot_of(stream: str, cluster: str, variant: str) -> Slot:
    """The :data:`Slot` of a sub-reader."""
    return (stream, cluster, variant) if variant else (stream, cluster)
