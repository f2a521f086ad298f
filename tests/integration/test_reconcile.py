"""Reader agents and reconcile events (real coordinator, etcd, brokers).

Agents run standalone in this process, exactly as they run inside Spark's
Python workers, so their sub-readers can be inspected."""

from __future__ import annotations

import gc
import os
import threading

import grpc
import pytest
from confluent_kafka import Consumer

from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread, procfs
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import ReaderAgent, ReadOptions, ReadTask
from multikafka.reader_agent._plan import tasks_from_plan
from multikafka.v1 import planner_pb2, reader_pb2, reader_pb2_grpc
from tests.conftest import KafkaClusters
from tests.helpers import eventually, produce_sequence, seeded_stream, stream_doc, uid

INTERNALS = ("multikafka.reader_agent._plan",)


pytestmark = pytest.mark.integration


def _agent(
    agents: list[ReaderAgent], coordinator: CoordinatorThread, **kwargs: object
) -> ReaderAgent:
    agent = ReaderAgent(**{"heartbeat_interval_s": 0.5, **kwargs})  # type: ignore[arg-type]
    agents.append(agent)
    agent.connect(coordinator.address)
    return agent


def _tasks(coordinator: CoordinatorThread, stream: str, query: str = "q") -> list[ReadTask]:
    """Plan the whole stream (earliest to latest) as tasks, like Spark would."""
    client = PlannerClient(coordinator.address, timeout_s=5)
    try:
        start, _ = client.resolve(stream, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        end, _ = client.resolve(stream, planner_pb2.Position(kind=planner_pb2.Position.LATEST))
        plan = client.plan(
            stream, query, start, end, min_partitions=1, max_records_per_partition=1_000_000
        )
    finally:
        client.close()
    options = ReadOptions(stream=stream, coordinator=coordinator.address)
    return tasks_from_plan(plan, options, coordinator=coordinator.address, query_id=query)


def _read_all(agent: ReaderAgent, tasks: list[ReadTask]) -> list[str]:
    keys: list[str] = []
    for task in tasks:
        for batch in agent.read(task):
            keys += [k.decode() for k in batch.column("key").to_pylist()]
    return keys


def test_agents_register_subscribe_and_apply_every_change(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    (a,) = kafka.shared(1)
    trio = [_agent(agents, coordinator) for _ in range(3)]
    ids = {x.agent_id for x in trio}
    eventually(lambda: ids <= {r.agent_id for r in admin.readers() if r.subscribed})
    coord = coordinator.coordinator
    assert coord is not None
    measured_before = len(coord.leading().reconciler.latencies)
    name = uid("reconcile")
    info = admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [uid("t")])}))
    eventually(lambda: all(x.applied_generation >= info.generation for x in trio))
    # A change no agent holds anything for still reaches every agent.
    info2 = admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [uid("t"), uid("u")])}))
    assert info2.generation > info.generation
    eventually(lambda: all(x.applied_generation >= info2.generation for x in trio))
    readers = {r.agent_id: r for r in admin.readers()}
    eventually(
        lambda: all(
            r.applied_generation >= info2.generation for r in admin.readers() if r.agent_id in ids
        )
    )
    assert all(readers[i].pid == os.getpid() for i in ids)
    assert len(coord.leading().reconciler.latencies) > measured_before


def test_agents_acknowledge_on_their_acknowledge_call_not_by_heartbeat(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    """With heartbeats 60 s apart, every change is still acknowledged at once,
    and no heartbeat came with it (one message on a held call, where a
    heartbeat per event costs a whole call)."""
    (a,) = kafka.shared(1)
    pair = [_agent(agents, coordinator, heartbeat_interval_s=60.0) for _ in range(2)]
    coord = coordinator.coordinator
    assert coord is not None
    registry = coord.leading().registry
    eventually(lambda: all((r := registry.get(x.agent_id)) and r.queue for x in pair))
    beats = {x.agent_id: registry.get(x.agent_id).last_heartbeat_ms for x in pair}  # type: ignore[union-attr]
    name = uid("ack")
    for topics in ([uid("t")], [uid("t"), uid("u")]):
        info = admin.put_stream(stream_doc(name, {"a": (a.bootstrap, topics)}))
        eventually(
            lambda info=info: all(
                registry.get(x.agent_id).applied_generation >= info.generation  # type: ignore[union-attr]
                for x in pair
            ),
            timeout_s=20,
        )
    assert {x.agent_id: registry.get(x.agent_id).last_heartbeat_ms for x in pair} == beats  # type: ignore[union-attr]


def test_acknowledge_refuses_bad_calls(coordinator: CoordinatorThread) -> None:
    """INVALID_ARGUMENT for an empty agent id, a second agent on one call and
    bytes that do not parse; acknowledgements of an agent nobody registered
    change nothing."""
    channel = grpc.insecure_channel(coordinator.address)
    try:
        stub = reader_pb2_grpc.ReaderStub(channel)
        ack = reader_pb2.AckRequest

        def code(requests: list[reader_pb2.AckRequest]) -> grpc.StatusCode:
            try:
                stub.Acknowledge(iter(requests), timeout=5)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        assert code([ack(agent_id="", applied_generation=1)]) == grpc.StatusCode.INVALID_ARGUMENT
        two = [ack(agent_id="one", applied_generation=1), ack(agent_id="two", applied_generation=1)]
        assert code(two) == grpc.StatusCode.INVALID_ARGUMENT
        assert code([ack(agent_id="nobody", applied_generation=99)]) == grpc.StatusCode.OK
        raw = channel.stream_unary(
            "/multikafka.v1.Reader/Acknowledge",
            request_serializer=lambda b: b,
            response_deserializer=reader_pb2.AckResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as err:
            raw(iter([b"\xff\xff\xff"]), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not parse" in (err.value.details() or "")
    finally:
        channel.close()
    coord = coordinator.coordinator
    assert coord is not None
    assert coord.leading().registry.get("nobody") is None


def test_only_the_changed_subreader_restarts(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    a, b = kafka.shared(2)
    moved = kafka.private("moved")
    topic = uid("move")
    for c in (a, b, moved):
        create_topics(c.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "a", range(20))
    # b's data also lives on "moved" (same offsets): b's bootstrap moves there.
    produce_sequence(b.bootstrap, topic, 1, "b", range(20))
    produce_sequence(moved.bootstrap, topic, 1, "b", range(20))
    name = uid("move")
    agent = _agent(agents, coordinator)
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    keys = _read_all(agent, _tasks(coordinator, name))
    assert len([k for k in keys if not k.startswith("__fence__")]) == 40
    before = {k: agent._subs[k] for k in agent.sub_readers()}
    assert set(before) == {(name, "a"), (name, "b")}

    info = admin.put_stream(
        stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (moved.bootstrap, [topic])})
    )
    eventually(lambda: agent.applied_generation >= info.generation)
    assert agent.sub_readers() == [(name, "a")]
    assert agent._subs[(name, "a")] is before[(name, "a")]
    assert before[(name, "b")].closed
    assert not before[(name, "a")].closed
    stats = {(s.stream, s.cluster): s for s in agent.stats()[1]}
    assert stats[(name, "b")].restarts == 1
    assert stats[(name, "a")].restarts == 0
    # The restarted sub-reader reads from the new broker.
    produce_sequence(moved.bootstrap, topic, 1, "b", range(20, 30))
    keys = _read_all(agent, _tasks(coordinator, name, "q2"))
    assert "b:25" in keys
    assert agent._subs[(name, "b")].consumer.connection.bootstrap_servers == moved.bootstrap  # type: ignore[attr-defined]
    # The coordinator sees the restart in the agent's heartbeat.
    eventually(
        lambda: any(
            f"{name}/b" in r.sub_readers for r in admin.readers() if r.agent_id == agent.agent_id
        )
    )


def test_assignments_show_what_each_agent_read(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    (a,) = kafka.shared(1)
    name, topic = seeded_stream(admin, a.bootstrap, "assign", partitions=2, records=10)
    agent = _agent(agents, coordinator)
    _read_all(agent, _tasks(coordinator, name))
    eventually(
        lambda: (
            {x.agent_id: set(x.splits) for x in admin.assignments(name)}.get(agent.agent_id)
            == {f"a/{topic}/0", f"a/{topic}/1"}
        )
    )


def test_idle_subreaders_are_closed(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    (a,) = kafka.shared(1)
    name, _ = seeded_stream(admin, a.bootstrap, "idle", records=5)
    agent = _agent(agents, coordinator, idle_timeout_s=0.3)
    assert "a:4" in _read_all(agent, _tasks(coordinator, name))  # through a sub-reader
    eventually(lambda: agent.sub_readers() == [], timeout_s=10)


def _os_threads() -> int:
    """OS threads of this process, without the coordinator's Kafka-call pool
    (a bounded ThreadPoolExecutor that starts its threads lazily)."""
    pool = sum(1 for t in threading.enumerate() if t.name.startswith("multikafka-kafka"))
    return len(procfs.threads()) - pool


def _open_fds() -> int:
    return procfs.fds()


def _consumers() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Consumer))


def test_add_remove_cycles_leave_nothing_behind(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    """100 times: a cluster joins a stream, an agent reads from it, the
    cluster leaves. Threads, file descriptors and consumer objects of this
    process (agent and coordinator both live here) return to where they were."""
    a, b = kafka.shared(2)
    topic = uid("cycle")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
        produce_sequence(c.bootstrap, topic, 1, c.name, range(5))
    name = uid("cycle")
    base_doc = stream_doc(name, {"a": (a.bootstrap, [topic])})
    full_doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "extra": (b.bootstrap, [topic])})
    agent = _agent(agents, coordinator)
    coord = coordinator.coordinator
    assert coord is not None

    def cycle() -> None:
        admin.put_stream(full_doc)
        tasks = _tasks(coordinator, name)
        assert any(r.cluster == "extra" for t in tasks for r in t.ranges)
        _read_all(agent, tasks)
        assert (name, "extra") in agent.sub_readers()
        info = admin.put_stream(base_doc)
        eventually(lambda: agent.applied_generation >= info.generation)
        assert (name, "extra") not in agent.tracked()

    admin.put_stream(base_doc)
    for _ in range(3):  # warm up thread pools and channels
        cycle()
    threads, fds, consumers = _os_threads(), _open_fds(), _consumers()
    clients = coord.leading().discovery.client_count()
    for _ in range(100):
        cycle()
    eventually(lambda: _os_threads() <= threads, timeout_s=10)
    assert _open_fds() <= fds
    assert _consumers() <= consumers
    assert coord.leading().discovery.client_count() == clients
    assert [k for k in agent.tracked() if k[0] == name] == [(name, "a")]
    names = {f"{s.stream}/{s.cluster}" for s in agent.stats()[1]}
    assert f"{name}/extra" not in names


def _labelled(coordinator: CoordinatorThread, streams: set[str]) -> list[str]:
    """Metric samples of the coordinator that are labelled with one of ``streams``."""
    coord = coordinator.coordinator
    assert coord is not None
    return [
        f"{s.name}{s.labels}"
        for family in coord.metrics.registry.collect()
        for s in family.samples
        if s.labels.get("stream") in streams
    ]


def test_stream_put_delete_cycles_leave_no_state_behind(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    """20 times: a stream with a standby is put, an agent reads it (read
    marks, holdings, per-cluster counters), it fails over, and is deleted.
    Nothing of it stays in the coordinator: no metric series, history, read
    marks, discovery client, or what the agent held of it."""
    a, b = kafka.shared(2)
    topic = uid("gone")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
        produce_sequence(c.bootstrap, topic, 1, c.name, range(5))
    agent = _agent(agents, coordinator)
    coord = coordinator.coordinator
    assert coord is not None
    names = {uid("gone") for _ in range(20)}
    for name in sorted(names):
        doc = stream_doc(
            name,
            {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])},
            states={"b": "STANDBY"},
        )
        admin.put_stream(doc)
        assert len(_read_all(agent, _tasks(coordinator, name))) >= 5
        eventually(lambda n=name: coord.leading().marks.at_or_before(n, f"a/{topic}/0", 10))
        eventually(lambda n=name: f"{n}/a" in coord.leading().registry.get(agent.agent_id).counted)  # type: ignore[union-attr]
        admin.failover(name, "a", "b", strategy="identity")
        assert _labelled(coordinator, {name})
        assert coord.leading().history.entries(name)
        assert admin.delete_stream(name)

    def gone() -> bool:
        d = coord.leading()
        registered = d.registry.get(agent.agent_id)
        assert registered is not None
        return (
            not _labelled(coordinator, names)
            and not any(d.history.entries(n) for n in names)
            and not any(d.marks.at_or_before(n, f"a/{topic}/0", 10) for n in names)
            and not any(d.discovery.clients(n) for n in names)
            and not names & set(registered.holdings)
            and not any(k.split("/")[0] in names for k in registered.counted)
        )

    eventually(gone, timeout_s=10)
