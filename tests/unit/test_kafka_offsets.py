"""Offsets by time in :class:`KafkaMetadataClient`, over a stand-in for
confluent-kafka's AdminClient that appends a record between two requests:
a time no record has reached yet resolves to the end the partition had
before the lookup, never to one asked for after it (which could start past
the record that just came, at or after the time)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from multikafka.coordinator.clusters.kafka import KafkaMetadataClient, OffsetQuery
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import UnavailableError
from multikafka.core.model import Connection

INTERNALS = (
    "multikafka.coordinator.clusters.kafka",
    "multikafka.core._secrets",
)


LatestSpec = type(OffsetSpec.latest())
TimestampSpec = type(OffsetSpec.for_timestamp(0))


class Info(NamedTuple):
    offset: int
    timestamp: int


class AppendingAdmin:
    """One partition whose record times are ``times`` (ms); every time
    lookup lets one more record (time ``then_ms``) arrive just after it."""

    def __init__(self, times: list[int], then_ms: int) -> None:
        self.times = times
        self.then_ms = then_ms
        self.requests: list[str] = []

    def list_offsets(
        self, request: dict[TopicPartition, Any], request_timeout: float, **kwargs: Any
    ) -> Any:
        out = {}
        for tp, spec in request.items():
            f: Future[Info] = Future()
            if isinstance(spec, LatestSpec):
                self.requests.append("latest")
                f.set_result(Info(len(self.times), -1))
            else:
                assert isinstance(spec, TimestampSpec)
                self.requests.append("time")
                at = spec.timestamp
                hits = [i for i, t in enumerate(self.times) if t >= at]
                f.set_result(Info(hits[0], self.times[hits[0]]) if hits else Info(-1, -1))
                self.times.append(self.then_ms)  # a record arrives right after the lookup
            out[tp] = f
        return out

    def poll(self, timeout: float) -> int:
        return 0


def client_with(admin: AppendingAdmin) -> KafkaMetadataClient:
    client = KafkaMetadataClient(Connection("c", "127.0.0.1:1", Properties({})))
    client._admin = admin  # type: ignore[assignment]
    return client


def test_a_time_no_record_reached_yet_resolves_to_the_end_before_the_lookup() -> None:
    # Records at 100 and 200; the lookup is for 500, and a record of time
    # 600 arrives right after it: the query must start at it (offset 2).
    admin = AppendingAdmin([100, 200], then_ms=600)
    got = client_with(admin).offsets([("t", 0)], OffsetQuery.at_time(500), 5.0)
    assert got == {("t", 0): 2}
    assert admin.requests == ["latest", "time"]


def test_a_time_some_record_reached_resolves_to_that_record() -> None:
    admin = AppendingAdmin([100, 200, 300], then_ms=600)
    assert client_with(admin).offsets([("t", 0)], OffsetQuery.at_time(150), 5.0) == {("t", 0): 1}


# -- the earliest, latest and last stable offsets: a consumer first ---------------------


class Answer(NamedTuple):
    """A TopicPartition as ``offsets_for_times`` answers it."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None


class OffsetsConsumer:
    """Answers ``offsets_for_times`` from ``ends`` (partition -> offset); a
    partition not in it answers an unknown-partition error; ``raises``: the
    whole call fails with that code."""

    def __init__(self, ends: dict[int, int], raises: int | None = None) -> None:
        self.ends = ends
        self.raises = raises
        self.calls = 0

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> Any:
        self.calls += 1
        if self.raises is not None:
            raise KafkaException(KafkaError(self.raises))
        out = []
        for tp in partitions:
            known = tp.partition in self.ends
            error = None if known else KafkaError(KafkaError._UNKNOWN_PARTITION)
            out.append(Answer(tp.topic, tp.partition, self.ends.get(tp.partition, -1), error))
        return out


class CountingAdmin:
    """The AdminClient's ``list_offsets``: ``ends`` known, others unknown."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = ends
        self.calls = 0

    def list_offsets(
        self, request: dict[TopicPartition, Any], request_timeout: float, **kwargs: Any
    ) -> Any:
        self.calls += 1
        out = {}
        for tp in request:
            f: Future[Info] = Future()
            if tp.partition in self.ends:
                f.set_result(Info(self.ends[tp.partition], -1))
            else:
                f.set_exception(KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION)))
            out[tp] = f
        return out

    def poll(self, timeout: float) -> int:
        return 0


def offsets_client(consumer: OffsetsConsumer, admin: CountingAdmin) -> KafkaMetadataClient:
    client = KafkaMetadataClient(Connection("c", "127.0.0.1:1", Properties({})))
    client._admin = admin  # type: ignore[assignment]
    client._offsets.close()
    client._offsets = consumer  # type: ignore[assignment]
    return client


@pytest.mark.parametrize("query", [OffsetQuery.stable(), OffsetQuery.earliest()])
def test_stable_and_earliest_offsets_are_asked_through_the_consumer_alone(
    query: OffsetQuery,
) -> None:
    consumer, admin = OffsetsConsumer({0: 7, 1: 9}), CountingAdmin({})
    got = offsets_client(consumer, admin).offsets([("t", 0), ("t", 1)], query, 5.0)
    assert got == {("t", 0): 7, ("t", 1): 9}
    assert (consumer.calls, admin.calls) == (1, 0)


def test_high_watermarks_are_asked_of_the_admin_client() -> None:
    # The consumer reads committed records: its latest is the last stable offset.
    consumer, admin = OffsetsConsumer({0: 7}), CountingAdmin({0: 9})
    assert offsets_client(consumer, admin).offsets([("t", 0)], OffsetQuery.latest(), 5.0) == {
        ("t", 0): 9
    }
    assert (consumer.calls, admin.calls) == (0, 1)


def test_a_partition_the_consumer_does_not_know_is_asked_of_the_admin_client() -> None:
    # The AdminClient tells a deleted partition (left out) from an unreachable one.
    consumer, admin = OffsetsConsumer({0: 7}), CountingAdmin({0: 7})
    got = offsets_client(consumer, admin).offsets([("t", 0), ("t", 1)], OffsetQuery.stable(), 5.0)
    assert got == {("t", 0): 7}
    assert (consumer.calls, admin.calls) == (1, 1)


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT])
def test_a_call_of_only_unknown_partitions_is_asked_of_the_admin_client(code: int) -> None:
    # librdkafka fails the whole call when it finds no partition's leader
    consumer = OffsetsConsumer({}, raises=code)
    admin = CountingAdmin({})
    assert offsets_client(consumer, admin).offsets([("t", 5)], OffsetQuery.earliest(), 5.0) == {}
    assert (consumer.calls, admin.calls) == (1, 1)


def test_a_cluster_that_does_not_answer_is_unavailable_without_asking_twice() -> None:
    consumer = OffsetsConsumer({}, raises=KafkaError._TIMED_OUT)
    admin = CountingAdmin({0: 1})
    with pytest.raises(UnavailableError, match="cluster c: list offsets"):
        offsets_client(consumer, admin).offsets([("t", 0)], OffsetQuery.stable(), 5.0)
    assert admin.calls == 0
