"""Per-split starting times (Spark's startingOffsetsByTimestamp) and the
available offsets of LatestOffsets, through the real coordinator on etcd and
tansu brokers.

tansu looks timestamps up by append time, so the tests produce, note the
time, produce more, and look that time up."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from multikafka import PreconditionError, Reader, ValidationError
from multikafka.core import _offsets as ov
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import ReaderAgent
from multikafka.v1 import planner_pb2
from tests.conftest import KafkaClusters
from tests.helpers import eventually, produce_sequence, stream_doc, uid

INTERNALS = ("multikafka.core._offsets",)


pytestmark = pytest.mark.integration
Position = planner_pb2.Position


@pytest.fixture
def planner(coordinator: CoordinatorThread) -> Iterator[PlannerClient]:
    client = PlannerClient(coordinator.address, timeout_s=5)
    yield client
    client.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def time_between() -> int:
    """A time after every record appended so far and before any appended
    later (the clock moves past it before this returns)."""
    t = now_ms()
    eventually(lambda: now_ms() > t, timeout_s=1, interval_s=0.001)
    return t + 1


@pytest.fixture
def two_clusters(admin: AdminClient, kafka: KafkaClusters) -> tuple[str, str, int]:
    """A stream over a (2 partitions) and b (1): 4 records per partition (3 +
    the fence) before the returned time, 4 more after. (stream, topic, time)."""
    a, b = kafka.shared(2)
    topic = uid("bytime")
    create_topics(a.bootstrap, {topic: 2})
    create_topics(b.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 2, "a", range(6))
    produce_sequence(b.bootstrap, topic, 1, "b", range(3))
    between = time_between()
    produce_sequence(a.bootstrap, topic, 2, "a", range(6, 12))
    produce_sequence(b.bootstrap, topic, 1, "b", range(3, 6))
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    return name, topic, between


def by_time(
    times: dict[str, int],
    *,
    kind: int = Position.EARLIEST,
    no_match: int = 0,
    offsets: dict[str, int] | None = None,
    **kw: object,
) -> planner_pb2.Position:
    """A position with split times ``times``; ``offsets`` the SPECIFIC ones."""
    if offsets is not None:
        kw["offsets"] = ov.to_columns(offsets)
    return Position(kind=kind, split_timestamps=ov.to_columns(times), no_match=no_match, **kw)  # type: ignore[arg-type]


def test_each_named_split_starts_at_its_own_time(
    two_clusters: tuple[str, str, int], planner: PlannerClient
) -> None:
    name, topic, between = two_clusters
    got, _ = planner.resolve(name, by_time({f"a/{topic}/0": between, f"b/{topic}/0": 0}))
    # a/0 at the first record after the time, b/0 at its first record,
    # a/1 (not named) where the position's kind says: earliest.
    assert got == {f"a/{topic}/0": 4, f"a/{topic}/1": 0, f"b/{topic}/0": 0}
    got, _ = planner.resolve(name, by_time({f"a/{topic}/1": between}, kind=Position.LATEST))
    assert got == {f"a/{topic}/0": 8, f"a/{topic}/1": 4, f"b/{topic}/0": 8}
    # with specific offsets for other splits
    got, _ = planner.resolve(
        name,
        by_time(
            {f"b/{topic}/0": between},
            kind=Position.SPECIFIC,
            offsets={f"a/{topic}/0": 2},
            fallback=Position.LATEST,
        ),
    )
    assert got == {f"a/{topic}/0": 2, f"a/{topic}/1": 8, f"b/{topic}/0": 4}


def test_no_record_after_the_time_fails_naming_the_split_or_starts_at_latest(
    two_clusters: tuple[str, str, int], planner: PlannerClient
) -> None:
    name, topic, between = two_clusters
    future = now_ms() + 3_600_000
    times = {f"a/{topic}/0": between, f"b/{topic}/0": future}
    with pytest.raises(PreconditionError) as info:
        planner.resolve(name, by_time(times))
    text = str(info.value)
    assert f"b/{topic}/0 (time {future})" in text
    assert f"a/{topic}/0" not in text
    assert "startingOffsetsByTimestampStrategy=latest" in text
    with pytest.raises(PreconditionError):
        planner.resolve(name, by_time(times, no_match=Position.NO_MATCH_ERROR))
    got, _ = planner.resolve(name, by_time(times, no_match=Position.NO_MATCH_LATEST))
    assert got == {f"a/{topic}/0": 4, f"a/{topic}/1": 0, f"b/{topic}/0": 8}


def test_bad_named_splits_are_invalid_arguments(
    two_clusters: tuple[str, str, int], planner: PlannerClient
) -> None:
    name, topic, _ = two_clusters
    cases = [
        ({f"zz/{topic}/0": 1}, {}, "no cluster 'zz'"),
        ({"a/nope/0": 1}, {}, "no topic 'nope'"),
        ({f"a/{topic}/7": 1}, {}, "there is no partition 7"),
        (
            {f"a/{topic}/0": 1},
            {"kind": Position.SPECIFIC, "offsets": {f"a/{topic}/0": 2}},
            "also named in position.offsets",
        ),
    ]
    for times, extra, says in cases:
        with pytest.raises(ValidationError) as info:
            planner.resolve(name, by_time(times, **{"kind": 0, **extra}))  # type: ignore[arg-type]
        text = str(info.value)  # INVALID_ARGUMENT naming the field and the split
        assert "position.split_timestamps." in text, text
        assert says in text


def test_latest_offsets_tells_what_is_available_beyond_the_limit(
    two_clusters: tuple[str, str, int], planner: PlannerClient
) -> None:
    name, topic, _ = two_clusters
    start, _ = planner.resolve(name, Position(kind=Position.EARLIEST))
    got = planner.latest_offsets(
        name, uid("q"), start, max_records=6, cap=None, fail_on_data_loss=True
    )
    assert sum(got.end.values()) == 6
    assert got.available == {f"a/{topic}/0": 8, f"a/{topic}/1": 8, f"b/{topic}/0": 8}
    capped = planner.latest_offsets(
        name, uid("q"), start, max_records=0, cap={f"a/{topic}/0": 1}, fail_on_data_loss=True
    )
    assert capped.end == {f"a/{topic}/0": 1, f"a/{topic}/1": 0, f"b/{topic}/0": 0}
    assert capped.available == got.available


def test_standalone_reader_starts_at_split_times_and_holds_small_batches(
    two_clusters: tuple[str, str, int],
    coordinator: CoordinatorThread,
    agents: list[ReaderAgent],
) -> None:
    name, topic, between = two_clusters
    agent = ReaderAgent()
    agents.append(agent)
    with Reader(
        coordinator.address,
        name,
        starting_offsets="latest",
        starting_offsets_by_timestamp={"a": {topic: {"0": between}}},
        min_records_per_batch=1000,
        max_batch_delay_s=1.5,
        kafka={"fetch.max.bytes": "2097152"},
        agent=agent,
        poll_interval_s=0.05,
    ) as reader:
        began = time.monotonic()
        batches = reader.batches(idle_timeout_s=30)
        first = next(batches)
        waited = time.monotonic() - began
        batches.close()
    # a/0 from the time on (offsets 4..7), the others from latest: 4 < 1000
    # records, held until max_batch_delay_s passed.
    assert first.column("partition").to_pylist() == [0] * 4
    assert first.column("offset").to_pylist() == [4, 5, 6, 7]
    assert set(first.column("cluster").to_pylist()) == {"a"}
    assert waited >= 1.5, f"read after {waited:.2f}s, before max_batch_delay_s"
    assert any(len(slot) == 3 for slot in agent.slots())  # a consumer with the settings
