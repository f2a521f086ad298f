"""The coordinator's registry of reader agents: event fan-out through
coalescing mailboxes (in memory), and per-agent state that goes with what it
describes."""

from __future__ import annotations

import asyncio

import pytest

from multikafka.coordinator.agents.registry import Agent, AgentRegistry, Mailbox, Outgoing, merge
from multikafka.v1 import reader_pb2

INTERNALS = ("multikafka.coordinator.agents.registry",)


def _registry_with(*agent_ids: str) -> AgentRegistry:
    registry = AgentRegistry(etcd=None, prefix="/t", ttl_s=10)  # type: ignore[arg-type]
    for agent_id in agent_ids:
        registry._agents[agent_id] = Agent(agent_id, "host", 1, 0)
    return registry


def _desired(cluster: str, fingerprint: str, state: str = "ACTIVE") -> reader_pb2.ClusterDesired:
    return reader_pb2.ClusterDesired(
        stream="s", cluster=cluster, fingerprint=fingerprint, state=state
    )


def _event(generation: int, *clusters: reader_pb2.ClusterDesired) -> reader_pb2.ReconcileEvent:
    return reader_pb2.ReconcileEvent(
        generation=generation, clusters=list(clusters), observed_ms=1000 + generation
    )


def _stats(stream: str, cluster: str, records: int) -> reader_pb2.SubReaderStats:
    return reader_pb2.SubReaderStats(stream=stream, cluster=cluster, records_read=records)


async def test_broadcast_reaches_every_subscribed_agent_serialized_once() -> None:
    registry = _registry_with("a", "b", "idle")
    qa, qb = registry.subscribe("a"), registry.subscribe("b")
    event = _event(7, _desired("x", "fp"))
    assert registry.broadcast(event) == 2
    a, b = qa.take(), qb.take()
    assert a is not None
    assert b is not None
    assert a.payload is b.payload  # one serialization for every agent
    assert reader_pb2.ReconcileEvent.FromString(a.payload) == event
    assert registry.get("idle").queue is None  # type: ignore[union-attr]


async def test_an_agent_that_falls_behind_gets_one_merged_event() -> None:
    """Events an agent's stream has not sent yet are merged: per cluster the
    latest desired state, the latest generation, the first change's time.
    It is never cut off and resynced."""
    registry = _registry_with("slow", "fast")
    slow, fast = registry.subscribe("slow"), registry.subscribe("fast")
    registry.broadcast(_event(1, _desired("x", "one"), _desired("y", "one")))
    assert fast.take() is not None
    registry.broadcast(_event(2, _desired("x", "two")))
    assert fast.take() is not None
    for g in range(3, 1000):
        registry.broadcast(_event(g, _desired("y", "", "REMOVED")))
        assert fast.take() is not None
    registry.broadcast(_event(1000, _desired("z", "new", "STANDBY")))

    item = slow.take()
    assert item is not None
    assert slow.take() is None  # one event holds it all
    assert (item.first, item.generation) == (1, 1000)
    event = reader_pb2.ReconcileEvent.FromString(item.payload)
    assert event.generation == 1000
    assert event.observed_ms == 1001
    assert not event.snapshot
    assert list(event.clusters) == [
        _desired("x", "two"),
        _desired("y", "", "REMOVED"),
        _desired("z", "new", "STANDBY"),
    ]
    assert registry.get("slow").queue is slow  # type: ignore[union-attr]


def test_merge_keeps_the_newer_state_of_a_cluster_that_came_back() -> None:
    removed = Outgoing.of(_event(4, _desired("x", "", "REMOVED")))
    back = Outgoing.of(_event(5, _desired("x", "fp2")))
    merged = merge(removed, back)
    assert list(merged.event.clusters) == [_desired("x", "fp2")]
    assert (merged.first, merged.generation) == (4, 5)
    assert reader_pb2.ReconcileEvent.FromString(merged.payload) == merged.event


async def test_a_waiting_subscription_wakes_for_an_event_and_ends_when_closed() -> None:
    mailbox = Mailbox()
    getter = asyncio.ensure_future(mailbox.get())
    await asyncio.sleep(0)
    assert not getter.done()
    mailbox.put(Outgoing.of(_event(3)))
    item = await asyncio.wait_for(getter, 1)
    assert item is not None
    assert item.generation == 3

    getter = asyncio.ensure_future(mailbox.get())
    await asyncio.sleep(0)
    mailbox.put(Outgoing.of(_event(4)))
    mailbox.close()
    item = await asyncio.wait_for(getter, 1)
    assert item is not None
    assert item.generation == 4
    assert await asyncio.wait_for(mailbox.get(), 1) is None


async def test_resubscribing_ends_the_previous_stream() -> None:
    registry = _registry_with("a")
    first = registry.subscribe("a")
    second = registry.subscribe("a")
    assert first.closed
    assert await asyncio.wait_for(first.get(), 1) is None
    assert registry.get("a").queue is second  # type: ignore[union-attr]
    registry.unsubscribe("a", first)  # the old stream's cleanup must not touch the new one
    assert registry.get("a").queue is second  # type: ignore[union-attr]
    registry.unsubscribe("a", second)
    assert registry.get("a").queue is None  # type: ignore[union-attr]


def test_counters_of_a_cluster_the_agent_dropped_are_forgotten() -> None:
    """The agent drops a removed cluster's counters; if the cluster comes
    back they start from 0, so what the metrics counted of them must go."""
    registry = _registry_with("a")
    agent = registry.get("a")
    assert agent is not None
    registry.heartbeat("a", 1, [_stats("s", "x", 10), _stats("s", "y", 5)])
    agent.counted = {"s/x": (10, 0), "s/y": (5, 0)}

    registry.heartbeat("a", 2, [_stats("s", "x", 12)])
    assert set(agent.sub_readers) == {"s/x"}
    assert agent.counted == {"s/x": (10, 0)}

    registry.heartbeat("a", 3, [])
    assert agent.sub_readers == {}
    assert agent.counted == {}


def test_forgetting_a_stream_drops_what_agents_held_of_it() -> None:
    registry = _registry_with("a", "b")
    registry.hold("a", "s", {"x/t/0"})
    registry.hold("a", "s2", {"x/t/1"})
    registry.hold("b", "s", {"x/t/2"})
    for agent_id in ("a", "b"):
        agent = registry.get(agent_id)
        assert agent is not None
        agent.counted = {"s/x": (1, 0), "s2/x": (2, 0)}

    registry.forget_stream("s")

    for agent_id in ("a", "b"):
        agent = registry.get(agent_id)
        assert agent is not None
        assert "s" not in agent.holdings
        assert agent.counted == {"s2/x": (2, 0)}
    assert registry.get("a").held("s2") == ["x/t/1"]  # type: ignore[union-attr]


def test_holdings_gather_the_splits_of_every_task_and_age_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A micro-batch's tasks each report some of an agent's splits: the
    agent holds all of them, until it has not read one for the window."""
    from multikafka.coordinator.agents import registry as agent_registry

    agent = agent_registry.Agent("a", "h", 1, 0)
    now = [100.0]
    monkeypatch.setattr(agent_registry.time, "monotonic", lambda: now[0])
    registry = agent_registry.AgentRegistry.__new__(agent_registry.AgentRegistry)
    registry._agents = {"a": agent}
    registry.hold("a", "s", {"c/t/0"})
    now[0] += 1
    registry.hold("a", "s", {"c/t/1"})
    assert agent.held("s") == ["c/t/0", "c/t/1"]
    now[0] += agent_registry.HOLDING_S
    assert agent.held("s") == ["c/t/1"]
    now[0] += 1
    assert agent.held("s") == []
    assert agent.holdings == {}


async def test_a_standby_sees_how_each_agent_converts() -> None:
    """The converter an agent registers with is kept in etcd with its
    registration, so a standby's ``admin readers`` shows it too; one from
    before agents said reads as unknown ("")."""
    import json

    from tests.fakes import FakeEtcd

    etcd = FakeEtcd()
    registry = AgentRegistry(etcd=etcd, prefix="/t", ttl_s=10)  # type: ignore[arg-type]
    await registry.start()
    try:
        await registry.register("a1", "h", 1, "c-accessors")
        await registry.register("a2", "h", 2, "python")
        await registry.register("a1", "h", 1, "c-direct")  # registers again, now direct
        await etcd.put(
            "/t/readers/old", json.dumps({"host": "h", "pid": 3, "registered_ms": 0}).encode()
        )
        seen = {a.agent_id: a.converter for a in await AgentRegistry.persisted(etcd, "/t")}  # type: ignore[arg-type]
        assert seen == {"a1": "c-direct", "a2": "python", "old": ""}
    finally:
        await registry.stop()
