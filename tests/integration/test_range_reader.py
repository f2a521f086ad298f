"""The Kafka range reader on a real broker: exact ranges, deterministic
re-reads, and data loss reported (never papered over)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from multikafka import DataLossError
from multikafka.devstack.feed import create_topics
from multikafka.devstack.stack import TANSU_PROPERTIES
from multikafka_core._secrets import Properties
from multikafka_core.model import Connection
from multikafka_core.providers import ReadOutcome, TopicPartitionRange
from multikafka_core.providers.kafka import KafkaRangeReader
from tests.conftest import KafkaClusters
from tests.helpers import produce_sequence, uid

pytestmark = pytest.mark.integration


@pytest.fixture
def reader(kafka: KafkaClusters) -> Iterator[KafkaRangeReader]:
    (a,) = kafka.shared(1)
    r = KafkaRangeReader(
        Connection("a", a.bootstrap, Properties(TANSU_PROPERTIES)), stall_check_s=1.0
    )
    yield r
    r.close()


def _read(
    reader: KafkaRangeReader, ranges: list[TopicPartitionRange], **kw: bool
) -> tuple[list[tuple[int, int, str]], ReadOutcome]:
    outcome = ReadOutcome()
    rows: list[tuple[int, int, str]] = []
    for cols in reader.read(
        ranges,
        outcome,
        include_headers=False,
        fail_on_data_loss=kw.get("fail_on_data_loss", True),
        should_abandon=lambda: False,
    ):
        rows += zip(
            cols.partition.to_pylist(),
            cols.offset.to_pylist(),
            [k.decode() for k in cols.key.to_pylist()],
            strict=True,
        )
    return rows, outcome


def test_exact_ranges_read_the_same_twice(kafka: KafkaClusters, reader: KafkaRangeReader) -> None:
    (a,) = kafka.shared(1)
    topic = uid("exact")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "k", range(2000))
    ranges = [TopicPartitionRange(topic, 0, 10, 510), TopicPartitionRange(topic, 1, 990, 1001)]
    first, outcome = _read(reader, ranges)
    assert sorted((p, o) for p, o, _ in first) == [(0, o) for o in range(10, 510)] + [
        (1, o) for o in range(990, 1001)
    ]
    assert outcome.records == 511
    assert outcome.last[(topic, 0)][0] == 509
    assert outcome.last[(topic, 1)][0] == 1000
    again, _ = _read(reader, ranges)
    assert sorted(again) == sorted(first)  # same records; partitions may interleave differently


def test_range_past_the_end_is_data_loss(kafka: KafkaClusters, reader: KafkaRangeReader) -> None:
    """A range that starts beyond the partition's end (the partition was
    recreated or truncated) is data loss; the reader must not read other
    offsets instead."""
    (a,) = kafka.shared(1)
    topic = uid("gone")
    create_topics(a.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "k", range(5))
    with pytest.raises(DataLossError, match="now ends at 6"):
        _read(reader, [TopicPartitionRange(topic, 0, 100, 120)])
    rows, outcome = _read(
        reader, [TopicPartitionRange(topic, 0, 100, 120)], fail_on_data_loss=False
    )
    assert rows == []
    assert outcome.lost == 20
