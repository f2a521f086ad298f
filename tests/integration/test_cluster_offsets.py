"""The coordinator's offset lookups on a real broker: the earliest and last
stable offsets asked through its consumer answer what the AdminClient
answers, and a partition that does not exist is left out (the
AdminClient, asked then, tells a deleted partition from an unreachable one),
as before the consumer asked first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from multikafka.coordinator.clusters.kafka import KafkaMetadataClient, OffsetQuery
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import UnavailableError
from multikafka.core.model import Connection
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.helpers import open_transaction, produce_sequence, transactional_producer, uid

INTERNALS = (
    "multikafka.coordinator.clusters.kafka",
    "multikafka.core._secrets",
)


class Topic(NamedTuple):
    client: KafkaMetadataClient
    bootstrap: str
    #: 2 partitions of 20 records and a fence each
    name: str


@pytest.fixture
def topic(kafka: KafkaClusters) -> Iterator[Topic]:
    (a,) = kafka.shared(1)
    name = uid("offsets")
    create_topics(a.bootstrap, {name: 2})
    produce_sequence(a.bootstrap, name, 2, "a", range(40))
    c = KafkaMetadataClient(Connection(a.name, a.bootstrap, Properties()))
    try:
        yield Topic(c, a.bootstrap, name)
    finally:
        c.close()


def _admin_offsets(
    bootstrap: str, topic: str, spec: Any, committed: bool
) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, p): spec for p in range(2)}, isolation_level=level
    )
    return {(tp.topic, tp.partition): f.result(10).offset for tp, f in futures.items()}


def test_offsets_through_the_consumer_answer_as_the_admin_client(topic: Topic) -> None:
    c, bootstrap, name = topic
    producer = transactional_producer(bootstrap)
    open_transaction(producer, name, ["x", "y", "z"], partition=1)  # left open
    try:
        parts = [(name, 0), (name, 1)]
        latest = c.offsets(parts, OffsetQuery.latest(), 10)
        stable = c.offsets(parts, OffsetQuery.stable(), 10)
        earliest = c.offsets(parts, OffsetQuery.earliest(), 10)
        assert latest == _admin_offsets(bootstrap, name, OffsetSpec.latest(), False)
        assert stable == _admin_offsets(bootstrap, name, OffsetSpec.latest(), True)
        assert earliest == _admin_offsets(bootstrap, name, OffsetSpec.earliest(), False)
        # 20 records and a fence each; partition 1 holds 3 more, not committed
        assert latest == {(name, 0): 21, (name, 1): 24}
        assert stable[(name, 0)] == 21
        assert stable[(name, 1)] < 24
        assert earliest == {(name, 0): 0, (name, 1): 0}
        # ... and they came from the consumer itself
        assert c._consumer_offsets(parts, OFFSET_END, 10) == stable
        assert c._consumer_offsets(parts, OFFSET_BEGINNING, 10) == earliest
    finally:
        producer.abort_transaction(10)


def test_a_partition_that_does_not_exist_is_left_out(topic: Topic) -> None:
    c, name = topic.client, topic.name
    for query in (OffsetQuery.stable(), OffsetQuery.latest()):
        assert c.offsets([(name, 0), (name, 7)], query, 10) == {(name, 0): 21}
    # Only partitions that do not exist: no leader found for any, as the
    # AdminClient answers it
    for parts in ([(name, 7)], [(uid("never"), 0)]):
        with pytest.raises(UnavailableError, match="No leaders found"):
            c.offsets(parts, OffsetQuery.earliest(), 10)
