"""Exact failover over transactional topics on real brokers: both sides
written in transactions (their markers take offsets, at other places on
each side), the mirror holding a batch twice (a copier that sent it again
after a restart) and records the query had not read yet. A standalone
reader (real coordinator, real tansu) reads the source; after a failover it
reads on from the mirror: every record once, and the failover's
translation says it matched the latest copy. And partitions with nothing to
match: one the source never wrote, one only the mirror has.

tansu hands out the records of aborted transactions to readers of committed
records (``docs/architecture.md``), so aborted records on either side are not
written here; what a mirror's reader skips the search skips too (it reads
with the stream's isolation level)."""

from __future__ import annotations

from typing import Any

import pytest

from multikafka import Reader
from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.helpers import eventually, stream_doc, transactional_producer, uid

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


def _produce(producer: Any, topic: str, partition: int, keys: list[str]) -> None:
    """Records of ``keys`` (value = key, time T0 + the key's number), each
    flushed on its own (tansu's high watermark)."""
    for key in keys:
        producer.produce(
            topic,
            key=key.encode(),
            value=key.encode(),
            partition=partition,
            timestamp=T0 + int(key.split(":")[1]),
        )
        producer.flush()


def _transaction(producer: Any, topic: str, keys: list[str]) -> None:
    """One committed transaction of :func:`_produce`'s records into partition 0."""
    producer.begin_transaction()
    _produce(producer, topic, 0, keys)
    producer.commit_transaction(15)


def _write(bootstrap: str, topic: str, partition: int, keys: list[str]) -> None:
    """:func:`_produce`'s records, without a transaction."""
    from confluent_kafka import Producer

    _produce(
        Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1}), topic, partition, keys
    )


def _keys(lo: int, hi: int) -> list[str]:
    return [f"r:{i}" for i in range(lo, hi)]


def _a_with_b_standby(admin: AdminClient, prefix: str, a: str, b: str, topic: str) -> str:
    """A new stream of ``topic`` on clusters a (ACTIVE) and b (STANDBY): its name."""
    name = uid(prefix)
    doc = stream_doc(name, {"a": (a, [topic]), "b": (b, [topic])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    admin.put_stream(doc)
    return name


def _read_all(reader: Reader) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for batch in reader.batches(idle_timeout_s=3):
        d = batch.to_pydict()
        rows += [(c, k.decode()) for c, k in zip(d["cluster"], d["key"], strict=True)]
        reader.commit()
    return rows


def test_transaction_markers_on_both_sides_and_a_batch_sent_twice_do_not_stop_an_exact_resume(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    a, b = kafka.shared(2)
    topic = uid("tx-exact")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
    source = transactional_producer(a.bootstrap)
    for lo, hi in ((0, 7), (7, 13), (13, 20)):
        _transaction(source, topic, _keys(lo, hi))
    # the mirror: the same records in other transactions, 14..19 sent twice,
    # then records the query had not read when the source died
    mirror = transactional_producer(b.bootstrap)
    for lo, hi in ((0, 12), (12, 20), (14, 20), (20, 25)):
        _transaction(mirror, topic, _keys(lo, hi))

    name = _a_with_b_standby(admin, "txf", a.bootstrap, b.bootstrap, topic)
    with Reader(coordinator.address, name, starting_offsets="earliest", query_id=name) as reader:
        first = _read_all(reader)
        assert [k for _, k in first] == _keys(0, 20)
        assert {c for c, _ in first} == {"a"}

        admin.failover(name, "a", "b", strategy="timestamp", margin_ms=1000, reason="test")
        rest: list[tuple[str, str]] = []
        eventually(lambda: rest.extend(_read_all(reader)) or len(rest) >= 5, timeout_s=60)
    assert [k for _, k in rest] == _keys(20, 25)  # nothing read twice, nothing skipped
    assert {c for c, _ in rest} == {"b"}
    (translated,) = [e.detail for e in admin.history(name) if e.kind == "translated"]
    assert "matched the last 4 records read" in translated
    assert "found at 2 places" in translated  # the batch sent twice: its latest copy


def test_an_empty_partition_and_a_mirror_with_more_partitions_read_every_record_once(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    """The source's partition 1 was never written; the mirror's topic has a
    partition 2 the source lacks (created wider, written by producers that
    moved there first). After the failover partition 0 resumes right after
    the copy of the last record read, 1 and 2 from their earliest record."""
    a, b = kafka.shared(2)
    topic = uid("wide")
    create_topics(a.bootstrap, {topic: 2})
    create_topics(b.bootstrap, {topic: 3})
    _write(a.bootstrap, topic, 0, _keys(0, 10))
    _write(b.bootstrap, topic, 0, _keys(0, 13))  # the copy, and 3 records not read yet
    _write(b.bootstrap, topic, 2, _keys(100, 103))

    name = _a_with_b_standby(admin, "wide", a.bootstrap, b.bootstrap, topic)
    with Reader(coordinator.address, name, starting_offsets="earliest", query_id=name) as reader:
        first = _read_all(reader)
        assert [k for _, k in first] == _keys(0, 10)

        admin.failover(name, "a", "b", strategy="timestamp", margin_ms=1000, reason="test")
        _write(b.bootstrap, topic, 1, _keys(200, 202))  # the empty partition, written after
        rest: list[tuple[str, str]] = []
        eventually(lambda: rest.extend(_read_all(reader)) or len(rest) >= 8, timeout_s=60)
        rest.extend(_read_all(reader))  # anything read twice would come now
    assert sorted(k for _, k in rest) == sorted(_keys(10, 13) + _keys(100, 103) + _keys(200, 202))
    assert {c for c, _ in rest} == {"b"}
    said = {e.detail.split()[2]: e.detail for e in admin.history(name) if e.kind == "translated"}
    assert set(said) == {f"b/{topic}/{p}" for p in range(3)}
    assert "matched the last 4 records read" in said[f"b/{topic}/0"]
    assert "starts at 0 (nothing read yet" in said[f"b/{topic}/1"]
    assert "starts at 0 (no counterpart on the failed cluster" in said[f"b/{topic}/2"]
