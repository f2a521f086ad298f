"""The coordinator's registry of reader agents: event fan-out (in memory)."""

from __future__ import annotations

from coordinator.agent_registry import QUEUE_SIZE, Agent, AgentRegistry
from multikafka_core.v1 import reader_pb2


def _registry_with(*agent_ids: str) -> AgentRegistry:
    registry = AgentRegistry(etcd=None, prefix="/t", ttl_s=10)  # type: ignore[arg-type]
    for agent_id in agent_ids:
        registry._agents[agent_id] = Agent(agent_id, "host", 1, 0)
    return registry


async def test_broadcast_reaches_every_subscribed_agent() -> None:
    registry = _registry_with("a", "b", "idle")
    qa, qb = registry.subscribe("a"), registry.subscribe("b")
    event = reader_pb2.ReconcileEvent(generation=7)
    assert registry.broadcast(event) == 2
    assert qa.get_nowait().generation == 7
    assert qb.get_nowait().generation == 7


async def test_an_agent_that_falls_behind_is_resynced() -> None:
    """A full queue ends the agent's stream (it subscribes again and gets a
    snapshot) instead of silently dropping events."""
    registry = _registry_with("slow", "fast")
    slow, fast = registry.subscribe("slow"), registry.subscribe("fast")
    for g in range(QUEUE_SIZE):
        registry.broadcast(reader_pb2.ReconcileEvent(generation=g))
        fast.get_nowait()
    assert registry.broadcast(reader_pb2.ReconcileEvent(generation=QUEUE_SIZE)) == 1
    assert slow.get_nowait() is None  # the end of its stream, and nothing stale before it
    assert registry.get("slow").queue is None  # type: ignore[union-attr]
    assert fast.get_nowait().generation == QUEUE_SIZE


async def test_resubscribing_ends_the_previous_stream() -> None:
    registry = _registry_with("a")
    first = registry.subscribe("a")
    second = registry.subscribe("a")
    assert first.get_nowait() is None
    assert registry.get("a").queue is second  # type: ignore[union-attr]
    registry.unsubscribe("a", first)  # the old stream's cleanup must not touch the new one
    assert registry.get("a").queue is second  # type: ignore[union-attr]
