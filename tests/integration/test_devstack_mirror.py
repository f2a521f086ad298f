"""The dev stack's MM2-format mirror (``multikafka.devstack.mirror``) on real
tansu brokers: the remote topic holds every record once at shifted offsets,
the offset-syncs topic on the source holds MM2's records where MM2's rule
puts them, each mapping a record to its copy, and MM2's translation of them
never skips a record."""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from multikafka.coordinator.translation.mm2 import SyncStore
from multikafka.core.mm2 import offset_syncs_topic
from multikafka.core.mm2_records import OffsetSync
from multikafka.devstack.counts import sequence_report
from multikafka.devstack.feed import Feed, create_topics, is_stream_key
from multikafka.devstack.mirror import EARLIER_KEY, Mm2Copy
from multikafka.devstack.stack import TANSU_PROPERTIES
from tests.conftest import KafkaClusters
from tests.helpers import eventually, uid

INTERNALS = ("multikafka.coordinator.translation.mm2",)


pytestmark = pytest.mark.integration

PARTITIONS = 3
LAG = 20
SHIFTS = (5, 17, 0)
MARKER_EVERY = 3
CHUNK = 120


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> key of every record of ``topic``, up to the
    high watermarks."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uid("g"), "enable.auto.commit": False}
        | TANSU_PROPERTIES
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: dict[tuple[int, int], bytes] = {}

        def all_read() -> bool:
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                records[(m.partition(), m.offset())] = m.key() or b""  # type: ignore[arg-type]
            # (transaction markers take offsets but are never handed out)
            at = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            return all(tp.offset >= ends[tp.partition] for tp in at)

        eventually(all_read, timeout_s=60, interval_s=0)
        return records
    finally:
        consumer.close()


@pytest.fixture
def mirrored(kafka: KafkaClusters) -> tuple[Feed, str, str]:
    """A feed of 1,000 records on a source topic, copied as MM2 would to
    ``src.<topic>`` on another cluster; (feed, source, mirror)."""
    source, mirror = (c.bootstrap for c in kafka.shared(2))
    topic = uid("orders")
    create_topics(source, {topic: PARTITIONS})
    copy = Mm2Copy(
        source,
        mirror,
        f"src.{topic}",
        syncs_cluster=source,
        syncs_topic=offset_syncs_topic(uid("west")),
        shifts=SHIFTS,
        marker_every=MARKER_EVERY,
        offset_lag_max=LAG,
    )
    copy.prepare(PARTITIONS)
    feed = Feed([source], topic, PARTITIONS, "r", chunk=CHUNK, pause_s=0, limit=1000, mirror=copy)
    feed.start()
    try:
        feed.join(60)
        assert not feed.is_alive(), "the feed did not finish within 60 s"
    finally:
        feed.stop()
    return feed, source, mirror


def test_the_remote_topic_holds_every_record_once_at_shifted_offsets(
    mirrored: tuple[Feed, str, str],
) -> None:
    feed, source, mirror = mirrored
    assert feed.mirror is not None
    upstream = read_all(source, feed.topic, PARTITIONS)
    downstream = read_all(mirror, feed.mirror.topic, PARTITIONS)
    keys = [k.decode() for k in downstream.values()]
    missing, duplicated = sequence_report(keys, {"r": 1000})
    assert (missing, duplicated) == ([], {})
    for p, shift in enumerate(SHIFTS):
        # the earlier replication's records come first, then the copies
        assert [downstream[(p, o)] for o in range(shift)] == [EARLIER_KEY] * shift
    # a copy is shifted by its partition's earlier records and the
    # transaction markers written before its chunk (which no reader sees)
    where = {k: (p, o) for (p, o), k in downstream.items()}
    for (p, up), key in upstream.items():
        if is_stream_key(key.decode()):
            seq = int(key.split(b":")[1])
            assert where[key] == (p, up + SHIFTS[p] + seq // CHUNK // MARKER_EVERY), key


def test_offset_syncs_are_mm2s_records_where_mm2s_rule_puts_them(
    mirrored: tuple[Feed, str, str],
) -> None:
    feed, source, mirror = mirrored
    assert feed.mirror is not None
    syncs_topic = feed.mirror.syncs_topic
    consumer = Consumer(
        {"bootstrap.servers": source, "group.id": uid("g"), "enable.auto.commit": False}
        | TANSU_PROPERTIES
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(syncs_topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(syncs_topic, 0, 0)])
        decoded: list[OffsetSync] = []

        def all_read() -> bool:
            for m in consumer.consume(100, 0.2):
                assert m.error() is None, m.error()
                decoded.append(OffsetSync.decode(m.key(), m.value()))  # type: ignore[arg-type]
            return len(decoded) >= end

        eventually(all_read, timeout_s=30, interval_s=0)
    finally:
        consumer.close()
    assert decoded == feed.mirror.syncs
    assert {s.topic for s in decoded} == {feed.topic}  # named for the source topic

    upstream = read_all(source, feed.topic, PARTITIONS)
    downstream = read_all(mirror, feed.mirror.topic, PARTITIONS)
    copy_of = {  # (partition, upstream offset) -> downstream offset
        (p, up): next(o for (q, o), k in downstream.items() if q == p and k == key)
        for (p, up), key in upstream.items()
        if is_stream_key(key.decode())
    }
    for p in range(PARTITIONS):
        syncs = [s for s in decoded if s.partition == p]
        # every sync maps a record to its copy
        assert all(copy_of[(p, s.upstream_offset)] == s.downstream_offset for s in syncs)
        # the first record, then the first copy LAG or more past (last sync + 1)
        assert syncs[0].upstream_offset == 0
        copies = sorted(d for (q, _), d in copy_of.items() if q == p)
        for a, b in itertools.pairwise(syncs):
            due = a.downstream_offset + 1 + LAG
            assert b.downstream_offset == min(d for d in copies if d >= due)
        assert not [d for d in copies if d >= syncs[-1].downstream_offset + 1 + LAG]

    # MM2's translation of these syncs never skips a record, and reads at
    # most LAG again: every position of every partition
    store = SyncStore()
    for s in decoded:
        store.add(s)
    for (p, up), down in copy_of.items():
        start = store.translate(feed.topic, p, up)
        assert start is not None
        assert start <= down
        read_again = [u for (q, u), d in copy_of.items() if q == p and u < up and d >= start]
        if up >= [s for s in decoded if s.partition == p][-2].upstream_offset:
            assert len(read_again) <= LAG


def test_the_syncs_topic_is_created_as_mm2_does(mirrored: tuple[Feed, str, str]) -> None:
    feed, source, _ = mirrored
    assert feed.mirror is not None
    admin = AdminClient({"bootstrap.servers": source})
    topic = admin.list_topics(feed.mirror.syncs_topic, timeout=10).topics[feed.mirror.syncs_topic]
    assert len(topic.partitions) == 1
    resource = ConfigResource("topic", feed.mirror.syncs_topic)
    config = admin.describe_configs([resource])[resource].result(10)
    assert config["cleanup.policy"].value == "compact"
