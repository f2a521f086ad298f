"""The range consumer remembers where each partition's last range ended: a
range that starts there goes on from what the consumer already fetched, on a
real broker; between reads the consumer fetches nothing; every other pattern
of reads still gets exactly its records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import TopicPartition

from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.model import Connection
from multikafka.devstack.feed import create_topics
from multikafka.devstack.stack import TANSU_PROPERTIES
from multikafka.reader_agent._range_consumer import KafkaRangeConsumer, ReadOutcome
from tests.conftest import KafkaClusters
from tests.helpers import produce_sequence, uid

INTERNALS = (
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._range_consumer",
)


pytestmark = pytest.mark.integration


def R(topic: str, partition: int, start: int, until: int) -> SplitRange:
    """A range of cluster ``a``, the one the reader reads."""
    return SplitRange("a", topic, partition, start, until)


def _reader(bootstrap: str, **kw: int) -> KafkaRangeConsumer:
    return KafkaRangeConsumer(
        Connection("a", bootstrap, Properties(TANSU_PROPERTIES)),
        poll_timeout_s=0.1,
        stall_check_s=1.0,
        **kw,  # type: ignore[arg-type]
    )


def _read(
    reader: KafkaRangeConsumer, ranges: list[SplitRange], *, within_s: float = 30.0
) -> tuple[list[tuple[int, int]], ReadOutcome]:
    """(partition, offset) of every record read, sorted; ranges not read
    within ``within_s`` are abandoned (the outcome says so)."""
    deadline = time.monotonic() + within_s
    outcome = ReadOutcome()
    rows: list[tuple[int, int]] = []
    for cols in reader.read(
        ranges,
        outcome,
        include_headers=False,
        fail_on_data_loss=True,
        should_abandon=lambda: time.monotonic() > deadline,
    ):
        rows += zip(cols.partition.to_pylist(), cols.offset.to_pylist(), strict=True)
    return sorted(rows), outcome


def _expected(ranges: list[SplitRange]) -> list[tuple[int, int]]:
    return sorted((r.partition, o) for r in ranges for o in range(r.start, r.until))


@pytest.fixture
def shared_reader(kafka: KafkaClusters) -> Iterator[tuple[KafkaRangeConsumer, str]]:
    (a,) = kafka.shared(1)
    topic = uid("cont")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "k", range(4000))  # 2,001 records per partition
    # A small consume batch, so leftovers past a range's end pause their partition.
    reader = _reader(a.bootstrap, batch_size=100)
    yield reader, topic
    reader.close()


@contextmanager
def frozen_after_first_range(
    kafka: KafkaClusters,
) -> Iterator[tuple[KafkaRangeConsumer, str]]:
    """A reader that read [0, 1000) of a 3,000-record partition (holding
    records after it), with the broker frozen inside."""
    cluster = kafka.private()
    broker = cluster.require_process()
    topic = uid("cont")
    create_topics(cluster.bootstrap, {topic: 1})
    produce_sequence(cluster.bootstrap, topic, 1, "k", range(3000))
    reader = _reader(cluster.bootstrap)
    try:
        first, _ = _read(reader, [R(topic, 0, 0, 1000)])
        assert first == _expected([R(topic, 0, 0, 1000)])
        broker.process.pause()
        try:
            yield reader, topic
        finally:
            broker.process.resume()
    finally:
        reader.close()


def test_the_next_range_of_a_split_is_read_from_what_was_fetched(kafka: KafkaClusters) -> None:
    """After [0, 1000) the consumer holds the records after it; with the
    broker frozen, [1000, 1500) still reads: nothing is fetched again."""
    with frozen_after_first_range(kafka) as (reader, topic):
        second, outcome = _read(reader, [R(topic, 0, 1000, 1500)], within_s=5.0)
    assert outcome.abandoned == []
    assert second == _expected([R(topic, 0, 1000, 1500)])
    assert (reader.continued, reader.positioned) == (1, 1)


def test_a_range_given_up_after_held_records_is_given_up_after_them(
    kafka: KafkaClusters,
) -> None:
    """After [0, 1000) the consumer holds records after it; with the broker
    frozen, a longer range reads those, then is given up: from the first
    record it did not read, not from its start (a failover that starts the
    query's next cluster there would read the held records again)."""
    with frozen_after_first_range(kafka) as (reader, topic):
        held, outcome = _read(reader, [R(topic, 0, 1000, 5000)], within_s=3.0)
    assert held, "the consumer held nothing past the first range"
    n = len(held)
    assert held == _expected([R(topic, 0, 1000, 1000 + n)])
    assert [(r.start, r.until) for r in outcome.abandoned] == [(1000 + n, 5000)]


def test_between_reads_the_consumer_fetches_nothing(kafka: KafkaClusters) -> None:
    """Records produced after a read are not fetched until a read needs them:
    with the broker frozen, the next range cannot be read. (A consumer that
    kept fetching between reads would hold them: every worker that ever read
    a split would fetch each of its records, and keep polling the broker.)
    Thawed, the same range reads, where the last one ended."""
    cluster = kafka.private()
    broker = cluster.require_process()
    topic = uid("park")
    create_topics(cluster.bootstrap, {topic: 1})
    produce_sequence(cluster.bootstrap, topic, 1, "k", range(100))
    reader = _reader(cluster.bootstrap)
    try:
        first, _ = _read(reader, [R(topic, 0, 0, 101)])  # 100 records and a fence
        assert first == _expected([R(topic, 0, 0, 101)])
        produce_sequence(cluster.bootstrap, topic, 1, "m", range(100))  # 101..200
        time.sleep(1.0)  # what a fetching consumer would use to fetch them
        broker.process.pause()
        try:
            frozen, outcome = _read(reader, [R(topic, 0, 101, 201)], within_s=2.0)
        finally:
            broker.process.resume()
        assert frozen == []
        assert [(r.start, r.until) for r in outcome.abandoned] == [(101, 201)]
        second, outcome = _read(reader, [R(topic, 0, 101, 201)])
        assert second == _expected([R(topic, 0, 101, 201)])
    finally:
        reader.close()


def test_every_pattern_of_reads_gets_exactly_its_records(
    shared_reader: tuple[KafkaRangeConsumer, str],
) -> None:
    reader, topic = shared_reader
    steps = [
        # both partitions; partition 0 ends early, so its later records are
        # consumed past its end while partition 1 goes on (leftovers)
        [R(topic, 0, 0, 10), R(topic, 1, 0, 1000)],
        # goes on at 10 from the leftovers; partition 1 is not needed (paused)
        [R(topic, 0, 10, 600)],
        # partition 1 resumes where it stopped
        [R(topic, 1, 1000, 1500)],
        # backwards: a re-read of the same offsets (a retried task)
        [R(topic, 0, 100, 200)],
        # a gap: forward past what was read
        [R(topic, 0, 700, 900), R(topic, 1, 1500, 2001)],
        # the same range twice in a row
        [R(topic, 0, 900, 2001)],
        [R(topic, 0, 900, 2001)],
    ]
    for ranges in steps:
        rows, outcome = _read(reader, ranges)
        assert rows == _expected(ranges), ranges
        assert outcome.records == len(rows)
        for r in ranges:
            assert outcome.last[(r.topic, r.partition)][0] == r.until - 1
    assert reader.continued >= 3  # steps 2, 3 and 5's partition 1


def test_what_is_kept_past_a_range_is_as_long_as_the_range(
    shared_reader: tuple[KafkaRangeConsumer, str],
) -> None:
    """librdkafka fetches far past a short range; the reader keeps (consumes
    and converts) only as many records past its end as the range had, for the
    split's next range, and that range still reads exactly."""
    reader, topic = shared_reader
    _read(reader, [R(topic, 0, 0, 10)])
    end, held = reader._leftover.get((topic, 0), (10, None))
    assert end == 10
    assert held is None or len(held) <= 10
    rows, _ = _read(reader, [R(topic, 0, 10, 30)])
    assert rows == _expected([R(topic, 0, 10, 30)])


def test_a_read_stopped_early_leaves_the_next_read_exact(
    shared_reader: tuple[KafkaRangeConsumer, str],
) -> None:
    """A caller that stops iterating (Spark cancelled the task) leaves the
    consumer somewhere unknown: the next read must not trust it."""
    reader, topic = shared_reader
    outcome = ReadOutcome()
    batches = reader.read(
        [R(topic, 0, 0, 2001)],
        outcome,
        include_headers=False,
        fail_on_data_loss=True,
        should_abandon=lambda: False,
    )
    next(batches)
    batches.close()
    rows, _ = _read(reader, [R(topic, 0, 0, 2001)])
    assert rows == _expected([R(topic, 0, 0, 2001)])


def test_nothing_stays_assigned_and_unused_partitions_are_forgotten(
    shared_reader: tuple[KafkaRangeConsumer, str],
) -> None:
    """Between reads nothing is assigned; a partition unused for 8 reads is
    forgotten (its next range is positioned, not continued), and still read."""
    reader, topic = shared_reader
    _read(reader, [R(topic, 1, 0, 50)])
    assert reader._consumer.assignment() == []
    for start in range(0, 90, 10):
        _read(reader, [R(topic, 0, start, start + 10)])
        assert reader._consumer.assignment() == []
    positioned = reader.positioned
    rows, outcome = _read(reader, [R(topic, 1, 50, 60)], within_s=5.0)
    assert outcome.abandoned == []
    assert rows == _expected([R(topic, 1, 50, 60)])
    assert reader.positioned == positioned + 1


def test_a_consumer_that_stopped_fetching_is_assigned_again(
    shared_reader: tuple[KafkaRangeConsumer, str],
) -> None:
    """Should the reader's kept state ever disagree with the consumer (here:
    the partition paused behind its back), a range does not wait forever:
    after the stall check finds records past where it stands, the partition
    is assigned again."""
    reader, topic = shared_reader
    _read(reader, [R(topic, 0, 0, 10)])
    reader._consumer.pause([TopicPartition(topic, 0)])
    rows, outcome = _read(reader, [R(topic, 0, 10, 20)], within_s=8.0)
    assert outcome.abandoned == []
    assert rows == _expected([R(topic, 0, 10, 20)])
