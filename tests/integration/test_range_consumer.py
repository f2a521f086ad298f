"""The Kafka range consumer on a real broker: exact ranges, deterministic
re-reads, and data loss reported (never papered over). Every test runs once
with the Python converter and once with the compiled one
(``MULTIKAFKA_CONVERTER``), and consumed messages convert alike with both."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from multikafka import DataLossError
from multikafka.core import env
from multikafka.core._fingerprint import TRAILING, Fingerprint, fingerprint
from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.model import Connection
from multikafka.devstack.feed import create_topics
from multikafka.devstack.stack import TANSU_PROPERTIES
from multikafka.reader_agent import _arrow as arrow
from multikafka.reader_agent._range_consumer import KafkaRangeConsumer, ReadOutcome
from tests.conftest import KafkaClusters
from tests.helpers import produce_mixed, produce_sequence, transactional_producer, uid

INTERNALS = (
    "multikafka.core._fingerprint",
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._range_consumer",
)


pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["python", "c"])
def converter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The converter the reader uses in this run (the compiled one must be built)."""
    name: str = request.param
    monkeypatch.setenv(env.CONVERTER, name)
    assert arrow.active_converter() == ("python" if name == "python" else "c-direct")
    return name


@pytest.fixture
def reader(kafka: KafkaClusters) -> Iterator[KafkaRangeConsumer]:
    (a,) = kafka.shared(1)
    r = KafkaRangeConsumer(
        Connection("a", a.bootstrap, Properties(TANSU_PROPERTIES)), stall_check_s=1.0
    )
    yield r
    r.close()


def _read(
    reader: KafkaRangeConsumer, ranges: list[SplitRange], **kw: bool
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


def test_exact_ranges_read_the_same_twice(kafka: KafkaClusters, reader: KafkaRangeConsumer) -> None:
    (a,) = kafka.shared(1)
    topic = uid("exact")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "k", range(2000))
    ranges = [SplitRange("a", topic, 0, 10, 510), SplitRange("a", topic, 1, 990, 1001)]
    first, outcome = _read(reader, ranges)
    assert sorted((p, o) for p, o, _ in first) == [(0, o) for o in range(10, 510)] + [
        (1, o) for o in range(990, 1001)
    ]
    assert outcome.records == 511
    assert outcome.last[(topic, 0)][0] == 509
    assert outcome.last[(topic, 1)][0] == 1000
    again, _ = _read(reader, ranges)
    assert sorted(again) == sorted(first)  # same records; partitions may interleave differently


def test_range_past_the_end_is_data_loss(kafka: KafkaClusters, reader: KafkaRangeConsumer) -> None:
    """A range that starts beyond the partition's end (the partition was
    recreated or truncated) is data loss; the reader must not read other
    offsets instead."""
    (a,) = kafka.shared(1)
    topic = uid("gone")
    create_topics(a.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "k", range(5))
    with pytest.raises(DataLossError, match="now ends at 6"):
        _read(reader, [SplitRange("a", topic, 0, 100, 120)])
    rows, outcome = _read(reader, [SplitRange("a", topic, 0, 100, 120)], fail_on_data_loss=False)
    assert rows == []
    assert outcome.lost == 20


def test_consumed_messages_convert_alike_with_every_converter(kafka: KafkaClusters) -> None:
    """Real consumed messages (null keys and values, headers, two
    partitions): the compiled converter, reading confluent-kafka's struct,
    gives the Python converter's columns."""
    (a,) = kafka.shared(1)
    topic = uid("convert")
    produce_mixed(a.bootstrap, topic, 200)
    consumer = Consumer(
        {**TANSU_PROPERTIES, "bootstrap.servers": a.bootstrap, "group.id": uid("convert")}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        msgs: list[Message] = []
        while len(msgs) < 200:
            msgs += [m for m in consumer.consume(200 - len(msgs), timeout=1) if m.error() is None]
    finally:
        consumer.close()
    python = arrow.convert(msgs, include_headers=True, converter="python")
    want = arrow.record_batch(python, "a", include_headers=True)
    assert want.num_rows == 200
    assert want.column("key").null_count == 40
    assert want.column("value").null_count == 29
    assert sum(h is not None for h in want.column("headers").to_pylist()) == 67
    last = python.last_per_partition(python.partitions())
    assert {tp: offset for tp, (offset, _) in last.items()} == {(topic, 0): 99, (topic, 1): 99}
    for name in ("c", "c-accessors"):
        got = arrow.convert(msgs, include_headers=True, converter=name)
        assert arrow.record_batch(got, "a", include_headers=True).equals(want), name
        assert got.last_per_partition(got.partitions()) == last


def _commit_transactions(bootstrap: str, topic: str, sizes: list[int]) -> list[int]:
    """Write one committed transaction per size to partition 0; returns the
    records' offsets (each transaction's commit marker takes an offset too)."""
    producer = transactional_producer(bootstrap)
    offsets: list[int] = []
    for n in sizes:
        producer.begin_transaction()
        for i in range(n):
            producer.produce(
                topic,
                key=f"k{i}".encode(),
                partition=0,
                on_delivery=lambda err, msg: offsets.append(msg.offset()),
            )
        producer.commit_transaction(15)
    return sorted(offsets)


def test_ranges_of_a_transactional_topic_end_at_their_markers(kafka: KafkaClusters) -> None:
    """A range ending with a transaction's commit marker (a control record,
    never handed out) is done when the consumer passes it: the read neither
    waits for records that do not exist nor takes the marker for a stall.
    The poll timeout is a minute, and a read that waited for the marker's
    offset as a record (as it did) takes at least that."""
    (a,) = kafka.shared(1)
    topic = uid("tx")
    create_topics(a.bootstrap, {topic: 1})
    offsets = _commit_transactions(a.bootstrap, topic, [5, 5, 5])
    end = offsets[-1] + 2  # the last marker's offset + 1: the log's end
    markers = sorted(set(range(end)) - set(offsets))
    assert markers == [offsets[4] + 1, offsets[9] + 1, end - 1]  # one per transaction
    reader = KafkaRangeConsumer(
        Connection("a", a.bootstrap, Properties(TANSU_PROPERTIES)),
        poll_timeout_s=60.0,
        stall_check_s=120.0,
    )
    try:
        for start, until in [(0, markers[0] + 1), (markers[0] + 1, end), (0, end)]:
            got: list[list[int]] = []

            def read_range(s: int = start, u: int = until, into: list[list[int]] = got) -> None:
                rows, _ = _read(reader, [SplitRange("a", topic, 0, s, u)])
                into.append([o for _, o, _ in rows])

            read = threading.Thread(target=read_range, daemon=True)
            read.start()
            read.join(20)
            assert not read.is_alive(), f"the read of [{start}, {until}) did not end"
            assert got == [[o for o in offsets if start <= o < until]]
    finally:
        reader.close()


def _fingerprints_on_the_broker(
    bootstrap: str, topic: str, partition: int, start: int, until: int
) -> list[Fingerprint]:
    """Fingerprints of ``[start, until)`` as the coordinator computes them,
    from the records a plain consumer fetches."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uid("g"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[Fingerprint] = []
        while len(out) < until - start:
            for m in consumer.consume(until - start - len(out), timeout=5):
                assert m.error() is None
                out.append(fingerprint(m.key(), m.value(), m.timestamp()[1]))
        return out
    finally:
        consumer.close()


def test_each_range_read_says_how_far_it_went_and_fingerprints_its_last_records(
    kafka: KafkaClusters, reader: KafkaRangeConsumer
) -> None:
    """What failover translation starts from: per range, the offset it went
    on to, its last record, and the fingerprints of its last records, equal
    to those the coordinator computes from the same records. The second read
    continues on what the first fetched past its ranges (leftovers)."""
    (a,) = kafka.shared(1)
    topic = uid("fp")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "k", range(400))
    first = [SplitRange("a", topic, 0, 0, 100), SplitRange("a", topic, 1, 50, 52)]
    second = [SplitRange("a", topic, 0, 100, 150)]
    for ranges in (first, second):
        _, outcome = _read(reader, ranges)
        assert [rr.range for rr in outcome.ranges] == ranges
        for rr in outcome.ranges:
            r = rr.range
            assert rr.next == r.until
            assert rr.last is not None
            assert rr.last[0] == r.until - 1
            tail = _fingerprints_on_the_broker(
                a.bootstrap, topic, r.partition, max(r.start, r.until - TRAILING), r.until
            )
            assert list(rr.fingerprints) == tail
            assert rr.last[1] == tail[-1].timestamp_ms
    assert len(outcome.ranges[0].fingerprints) == TRAILING


def test_a_range_given_up_says_where_and_one_of_markers_only_has_no_last_record(
    kafka: KafkaClusters,
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("fp-tx")
    create_topics(a.bootstrap, {topic: 1})
    offsets = _commit_transactions(a.bootstrap, topic, [3])
    marker = offsets[-1] + 1
    reader = KafkaRangeConsumer(
        Connection("a", a.bootstrap, Properties(TANSU_PROPERTIES)), poll_timeout_s=0.2
    )
    try:
        outcome = ReadOutcome()
        list(
            reader.read(
                [SplitRange("a", topic, 0, marker, marker + 1)],
                outcome,
                include_headers=False,
                fail_on_data_loss=True,
                should_abandon=lambda: False,
            )
        )
        assert [(rr.next, rr.last, rr.fingerprints) for rr in outcome.ranges] == [
            (marker + 1, None, ())
        ]
        # records 0..2 and the marker exist, nothing after: given up at the end
        outcome = ReadOutcome()
        list(
            reader.read(
                [SplitRange("a", topic, 0, 0, marker + 10)],
                outcome,
                include_headers=False,
                fail_on_data_loss=True,
                should_abandon=lambda: True,
            )
        )
        (rr,) = outcome.ranges
        assert rr.next == marker + 1
        assert rr.last is not None
        assert rr.last[0] == offsets[-1]
        assert len(rr.fingerprints) == 3
        assert [r.start for r in outcome.abandoned] == [marker + 1]
    finally:
        reader.close()
