"""The Planner service against real brokers: positions, budgets, plans,
unreachable clusters, data loss."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from multikafka import DataLossError, PreconditionError, ValidationError
from multikafka.core._offsets import NO_SPLITS
from multikafka.core._positions import specific as specific_position
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import SequenceProducer, create_topics, fence
from multikafka.v1 import planner_pb2
from tests.conftest import KafkaClusters
from tests.helpers import (
    eventually,
    open_transaction,
    produce_sequence,
    seeded_stream,
    stream_doc,
    transactional_producer,
    uid,
)

INTERNALS = (
    "multikafka.core._offsets",
    "multikafka.core._positions",
    "multikafka.core._ranges",
)


pytestmark = pytest.mark.integration
Position = planner_pb2.Position
EARLIEST = Position(kind=Position.EARLIEST)
LATEST = Position(kind=Position.LATEST)


@pytest.fixture
def planner(coordinator: CoordinatorThread) -> Iterator[PlannerClient]:
    client = PlannerClient(coordinator.address, timeout_s=5)
    yield client
    client.close()


def test_resolve_positions(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    a, b = kafka.shared(2)
    topic = uid("pos")
    create_topics(a.bootstrap, {topic: 2})
    create_topics(b.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 2, "a", range(10))  # 5 + fence per partition
    before_b = int(time.time() * 1000)
    produce_sequence(b.bootstrap, topic, 1, "b", range(4))
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))

    earliest, _ = planner.resolve(name, EARLIEST)
    assert earliest == {f"a/{topic}/0": 0, f"a/{topic}/1": 0, f"b/{topic}/0": 0}
    assert list(earliest) == sorted(earliest)
    latest, _ = planner.resolve(name, LATEST)
    assert latest == {f"a/{topic}/0": 6, f"a/{topic}/1": 6, f"b/{topic}/0": 5}
    specific, _ = planner.resolve(
        name,
        specific_position({f"a/{topic}/0": 3, f"a/{topic}/1": -1}, fallback=Position.EARLIEST),
    )
    assert specific == {f"a/{topic}/0": 3, f"a/{topic}/1": 6, f"b/{topic}/0": 0}
    future, _ = planner.resolve(
        name, Position(kind=Position.TIMESTAMP, timestamp_ms=int(time.time() * 1000) + 60_000)
    )
    assert future == latest
    past, _ = planner.resolve(
        name, Position(kind=Position.TIMESTAMP, timestamp_ms=before_b - 60_000)
    )
    assert past == earliest


def test_specific_offsets_for_unknown_cluster_or_topic(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("spec")
    create_topics(a.bootstrap, {topic: 1})
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    with pytest.raises(ValidationError, match="no cluster 'zz'"):
        planner.resolve(name, specific_position({f"zz/{topic}/0": 1}))
    with pytest.raises(ValidationError, match="no topic 'nope'"):
        planner.resolve(name, specific_position({"a/nope/0": 1}))


def test_stream_without_partitions_has_placeholder_vector(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    (a,) = kafka.shared(1)
    name = uid("empty")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [uid("not-created-yet")])}))
    offsets, _ = planner.resolve(name, EARLIEST)
    assert offsets == {NO_SPLITS: 0}
    end = planner.latest(name, "q", offsets, max_records=0, cap=None, fail_on_data_loss=True)
    assert end == {NO_SPLITS: 0}


def test_budget_follows_backlog(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    a, b = kafka.shared(2)
    topic = uid("budget")
    create_topics(a.bootstrap, {topic: 1})
    create_topics(b.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "a", range(2999))  # 3000 with the fence
    produce_sequence(b.bootstrap, topic, 1, "b", range(999))  # 1000
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    start, _ = planner.resolve(name, EARLIEST)
    end = planner.latest(name, "q", start, max_records=400, cap=None, fail_on_data_loss=True)
    assert end == {f"a/{topic}/0": 300, f"b/{topic}/0": 100}
    everything = planner.latest(name, "q", start, max_records=0, cap=None, fail_on_data_loss=True)
    assert everything == {f"a/{topic}/0": 3000, f"b/{topic}/0": 1000}
    capped = planner.latest(
        name, "q", start, max_records=0, cap={f"a/{topic}/0": 10}, fail_on_data_loss=True
    )
    assert capped == {f"a/{topic}/0": 10, f"b/{topic}/0": 0}


def test_plan_is_balanced_and_carries_connections(
    make_coordinator: Callable[..., CoordinatorThread], kafka: KafkaClusters
) -> None:
    coord = make_coordinator(reader_token="r3ader")
    planner = PlannerClient(ConnectConfig.parse(coord.address, token="r3ader"), timeout_s=5)
    a, b = kafka.shared(2)
    topic = uid("plan")
    create_topics(a.bootstrap, {topic: 3})
    create_topics(b.bootstrap, {topic: 1})
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["a"]["properties"]["sasl.password"] = "pw"
    with AdminClient(coord.address) as admin:
        admin.put_stream(doc)
    start = {f"a/{topic}/0": 0, f"a/{topic}/1": 0, f"a/{topic}/2": 0, f"b/{topic}/0": 0}
    end = {f"a/{topic}/0": 900, f"a/{topic}/1": 100, f"a/{topic}/2": 50, f"b/{topic}/0": 2000}
    try:
        plan = planner.plan(name, "q", start, end, min_partitions=4, max_records_per_partition=1000)
        loads = [(r.cluster, r.partition, r.size) for t in plan.tasks for r in t]
        # One task per split, the one above 1000 records cut in two equal pieces.
        assert loads == [("a", 0, 900), ("a", 1, 100), ("a", 2, 50), ("b", 0, 1000), ("b", 0, 1000)]
        # Fewer splits than Spark's parallelism: the largest ranges are cut further.
        wide = planner.plan(name, "q", start, end, parallelism=8)
        assert len(wide.tasks) == 8
        assert sum(r.size for t in wide.tasks for r in t) == 3050
        conns = plan.clusters
        # executors need the real value; only an authenticated reader gets it
        assert conns["a"].properties["sasl.password"] == "pw"
        assert conns["a"].fingerprint
        assert conns["a"].fingerprint != conns["b"].fingerprint
        # A split entering the vector has nothing to read in that batch.
        only_new = planner.plan(
            name, "q", {}, {f"a/{topic}/0": 5}, min_partitions=1, max_records_per_partition=1000
        )
        assert list(only_new.tasks) == []
    finally:
        planner.close()


def test_secrets_are_not_handed_out_without_reader_authentication(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    """The session coordinator has no reader token and no client CA: a plan
    that would carry a secret property is refused, saying what to configure;
    one without secrets is served."""
    (a,) = kafka.shared(1)
    topic = uid("open")
    create_topics(a.bootstrap, {topic: 1})
    secret, plain = uid("s"), uid("s")
    doc = stream_doc(secret, {"a": (a.bootstrap, [topic])})
    doc["clusters"]["a"]["properties"]["sasl.password"] = "pw-123"
    admin.put_stream(doc)
    admin.put_stream(stream_doc(plain, {"a": (a.bootstrap, [topic])}))
    vector = ({f"a/{topic}/0": 0}, {f"a/{topic}/0": 10})
    with pytest.raises(PreconditionError) as info:
        planner.plan(secret, "q", *vector, min_partitions=1, max_records_per_partition=1000)
    assert "secret properties" in str(info.value)
    assert "--reader-token-file" in str(info.value)
    assert "pw-123" not in str(info.value)
    plan = planner.plan(plain, "q", *vector, min_partitions=1, max_records_per_partition=1000)
    assert list(plan.clusters) == ["a"]


def test_unreachable_cluster_gets_no_new_range_and_resumes(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    (good,) = kafka.shared(1)
    bad = kafka.private("paused")
    broker = bad.require_process()
    topic = uid("down")
    for c in (good, bad):
        create_topics(c.bootstrap, {topic: 1})
        produce_sequence(c.bootstrap, topic, 1, c.name, range(9))
    name = uid("s")
    admin.put_stream(
        stream_doc(name, {"good": (good.bootstrap, [topic]), "bad": (bad.bootstrap, [topic])})
    )
    start, _ = planner.resolve(name, EARLIEST)
    assert start == {f"bad/{topic}/0": 0, f"good/{topic}/0": 0}
    broker.process.pause()
    try:
        produce_sequence(good.bootstrap, topic, 1, "good2", range(9))
        end = planner.latest(name, "q", start, max_records=0, cap=None, fail_on_data_loss=True)
        assert end == {f"bad/{topic}/0": 0, f"good/{topic}/0": 20}
        # While it stays down, later calls skip it without waiting on it.
        end2 = planner.latest(name, "q", end, max_records=0, cap=None, fail_on_data_loss=True)
        assert end2 == end
        info = admin.get_stream(name)
        assert {c.cluster: c.reachable for c in info.clusters} == {"bad": False, "good": True}
    finally:
        broker.process.resume()

    def bad_resumed() -> bool:
        v = planner.latest(name, "q", end, max_records=0, cap=None, fail_on_data_loss=True)
        assert v[f"bad/{topic}/0"] == 10, v
        return True

    eventually(bad_resumed, timeout_s=20)


def test_offsets_gone_backwards_is_data_loss(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    (a,) = kafka.shared(1)
    name, topic = seeded_stream(admin, a.bootstrap, "loss", records=4)
    ahead = {f"a/{topic}/0": 50}  # the query read further than the partition now ends
    with pytest.raises(DataLossError, match="went backwards"):
        planner.latest(name, "q", ahead, max_records=0, cap=None, fail_on_data_loss=True)
    end = planner.latest(name, "q", ahead, max_records=0, cap=None, fail_on_data_loss=False)
    assert end == {f"a/{topic}/0": 0}
    assert any(e.kind == "data-loss" for e in admin.history(name))


def test_group_commit_after_spark_commit(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    (a,) = kafka.shared(1)
    name, topic = seeded_stream(admin, a.bootstrap, "group", records=9)
    group = uid("lag-tools")
    planner.commit(name, "q-group", {f"a/{topic}/0": 7}, group)
    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 7
    finally:
        consumer.close()
    assert {q.query_id: dict(q.offsets) for q in admin.queries()}["q-group"] == {f"a/{topic}/0": 7}


def test_unknown_stream_is_not_found(planner: PlannerClient) -> None:
    from multikafka import NotFoundError

    with pytest.raises(NotFoundError):
        planner.resolve(uid("missing"), EARLIEST)


def test_producer_helper_fences_make_watermarks_exact(kafka: KafkaClusters) -> None:
    """The test-data helper's contract with tansu (docs/architecture.md): after a
    batched produce and a fence, the high watermark counts every record."""
    from confluent_kafka import Consumer, TopicPartition

    (a,) = kafka.shared(1)
    topic = uid("fence")
    create_topics(a.bootstrap, {topic: 2})
    producer = SequenceProducer(a.bootstrap)
    producer.produce(topic, 2, "x", range(5000))
    producer.flush()
    fence(a.bootstrap, topic, 2)
    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "wm"})
    try:
        highs = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(2)
        ]
    finally:
        consumer.close()
    assert highs == [2501, 2501]


def test_the_planner_speaks_columns_on_the_wire(
    admin: AdminClient, kafka: KafkaClusters, coordinator: CoordinatorThread
) -> None:
    """The Planner's messages as any gRPC client sends them (no
    PlannerClient): offset vectors in OffsetColumns, a plan's tasks in
    RangeColumns, one form each."""
    import grpc

    from multikafka.core import _offsets as ov
    from multikafka.core import _ranges as ranges
    from multikafka.v1 import planner_pb2_grpc

    (a,) = kafka.shared(1)
    name, topic = seeded_stream(admin, a.bootstrap, "wire", records=9)
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = planner_pb2_grpc.PlannerStub(channel)
        resolved = stub.ResolveOffsets(
            planner_pb2.ResolveOffsetsRequest(stream=name, position=EARLIEST), timeout=10
        )
        assert dict(ov.from_columns(resolved.offsets)) == {f"a/{topic}/0": 0}
        latest = stub.LatestOffsets(
            planner_pb2.LatestOffsetsRequest(stream=name, query_id="wire", start=resolved.offsets),
            timeout=10,
        )
        assert dict(ov.from_columns(latest.end)) == {f"a/{topic}/0": 10}
        assert dict(ov.from_columns(latest.available)) == {f"a/{topic}/0": 10}
        plan = stub.PlanPartitions(
            planner_pb2.PlanPartitionsRequest(
                stream=name, query_id="wire", start=resolved.offsets, end=latest.end
            ),
            timeout=10,
        )
        assert ranges.tasks_of(plan.tasks) == [(ranges.SplitRange("a", topic, 0, 0, 10),)]
        stub.Commit(
            planner_pb2.CommitRequest(stream=name, query_id="wire", end=latest.end), timeout=10
        )
    assert {q.query_id: dict(q.offsets) for q in admin.queries()}["wire"] == {f"a/{topic}/0": 10}


def test_readers_of_committed_records_are_never_planned_into_an_open_transaction(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    """A query whose readers read committed records (librdkafka's default,
    or its kafka.isolation.level) is planned to the last stable offset: its
    readers would wait at the first record of a transaction still open for
    as long as it stays open. One reading uncommitted records goes to the
    high watermark. tansu answers 0 for the last stable offset of a
    partition with a transaction open (Kafka: the transaction's first
    offset); the planner then finds the high watermark at the query's
    position (no loss) and plans no range, as it would on Kafka here."""
    (a,) = kafka.shared(1)
    topic = uid("tx")
    create_topics(a.bootstrap, {topic: 1})
    producer = transactional_producer(a.bootstrap)

    open_transaction(producer, topic, ["c0", "c1", "c2"])
    producer.commit_transaction(15)  # records 0-2, the commit marker at 3
    name = uid("s")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    split = f"a/{topic}/0"

    def latest(start: int, isolation_level: str = "") -> dict[str, int]:
        return dict(
            planner.latest(
                name,
                "q",
                {split: start},
                max_records=0,
                cap=None,
                fail_on_data_loss=True,
                isolation_level=isolation_level,
            )
        )

    eventually(lambda: latest(0) == {split: 4})
    open_transaction(producer, topic, ["o0", "o1"])  # records 4 and 5, not committed yet
    eventually(lambda: latest(4, "read_uncommitted") == {split: 6})
    assert latest(4) == {split: 4}
    assert latest(4, "read_committed") == {split: 4}
    producer.commit_transaction(15)  # the marker at 6
    eventually(lambda: latest(4) == {split: 7})
    resolved, _ = planner.resolve(name, LATEST)
    assert resolved == {split: 7}
