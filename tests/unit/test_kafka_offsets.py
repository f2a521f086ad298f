"""Offsets by time in :class:`KafkaMetadataClient`, over a stand-in for
confluent-kafka's AdminClient that appends a record between two requests:
a time no record has reached yet resolves to the end the partition had
before the lookup, never to one asked for after it (which could start past
the record that just came, at or after the time)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, NamedTuple

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from multikafka.coordinator.clusters.kafka import KafkaMetadataClient, OffsetQuery
from multikafka.core._secrets import Properties
from multikafka.core.model import Connection

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
