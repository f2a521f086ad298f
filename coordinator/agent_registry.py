"""Registered reader agents: who they are, what generation they applied, which
sub-readers and splits they hold, and their event queues.

Registrations are written to ``<prefix>/readers/<agent id>`` under one lease
the coordinator keeps alive, so they vanish with a coordinator that dies, and
are removed by the coordinator when an agent misses heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.etcd import MALFORMED, EtcdClient
from multikafka_core.background import BackgroundTasks
from multikafka_core.exceptions import UnavailableError
from multikafka_core.v1 import reader_pb2

logger = logging.getLogger(__name__)

#: Events an agent's queue holds before it is considered stuck and resynced.
QUEUE_SIZE = 256


@dataclass
class Agent:
    agent_id: str
    host: str
    pid: int
    registered_ms: int
    last_heartbeat: float = field(default_factory=time.monotonic)
    last_heartbeat_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    applied_generation: int = 0
    #: Stats the agent last pushed, per "stream/cluster".
    sub_readers: dict[str, reader_pb2.SubReaderStats] = field(default_factory=dict)
    #: stream -> split ids this agent read most recently.
    holdings: dict[str, set[str]] = field(default_factory=dict)
    #: "stream/cluster" -> (records read, restarts) the metrics already count.
    counted: dict[str, tuple[int, int]] = field(default_factory=dict)
    queue: asyncio.Queue[reader_pb2.ReconcileEvent | None] | None = None


class AgentRegistry:
    def __init__(self, etcd: EtcdClient, prefix: str, ttl_s: float) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/readers/"
        self._ttl_s = ttl_s
        self._agents: dict[str, Agent] = {}
        self._lease: int | None = None
        self._tasks = BackgroundTasks("agent registry")
        self._applied_listeners: list[Callable[[Agent], None]] = []
        self.on_expired: list[Callable[[Agent], None]] = []

    def agents(self) -> list[Agent]:
        return [self._agents[a] for a in sorted(self._agents)]

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def on_applied(self, listener: Callable[[Agent], None]) -> None:
        self._applied_listeners.append(listener)

    async def start(self) -> None:
        await self._etcd.delete_prefix(self._prefix)  # registrations of a previous incarnation
        self._lease = await self._etcd.grant_lease(max(int(self._ttl_s), 2))
        self._tasks.every("keepalive", max(self._ttl_s / 3, 0.5), self._keepalive)

    async def stop(self) -> None:
        await self._tasks.stop()
        for agent in self._agents.values():
            if agent.queue is not None:
                agent.queue.put_nowait(None)
        if self._lease is not None:
            with contextlib.suppress(UnavailableError):
                await self._etcd.revoke_lease(self._lease)

    async def register(self, agent_id: str, host: str, pid: int) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = Agent(agent_id, host, pid, int(time.time() * 1000))
            logger.info(
                "reader agent registered", extra={"agent": agent_id, "host": host, "pid": pid}
            )
        agent.last_heartbeat = time.monotonic()
        await self._persist(agent)
        return agent

    def heartbeat(
        self, agent_id: str, applied: int, stats: list[reader_pb2.SubReaderStats]
    ) -> Agent | None:
        agent = self._agents.get(agent_id)
        if agent is None:
            return None
        agent.last_heartbeat = time.monotonic()
        agent.last_heartbeat_ms = int(time.time() * 1000)
        agent.sub_readers = {f"{s.stream}/{s.cluster}": s for s in stats}
        if applied > agent.applied_generation:
            agent.applied_generation = applied
            for listener in self._applied_listeners:
                listener(agent)
        return agent

    def subscribe(self, agent_id: str) -> asyncio.Queue[reader_pb2.ReconcileEvent | None]:
        agent = self._agents[agent_id]
        if agent.queue is not None:
            agent.queue.put_nowait(None)  # end the previous subscription
        agent.queue = asyncio.Queue(QUEUE_SIZE)
        return agent.queue

    def unsubscribe(
        self, agent_id: str, queue: asyncio.Queue[reader_pb2.ReconcileEvent | None]
    ) -> None:
        agent = self._agents.get(agent_id)
        if agent is not None and agent.queue is queue:
            agent.queue = None

    def subscribed(self) -> list[Agent]:
        return [a for a in self._agents.values() if a.queue is not None]

    def broadcast(self, event: reader_pb2.ReconcileEvent) -> int:
        """Queue ``event`` for every subscribed agent; returns how many."""
        sent = 0
        for agent in self.subscribed():
            queue = agent.queue
            if queue is None:
                continue
            try:
                queue.put_nowait(event)
                sent += 1
            except asyncio.QueueFull:
                # End the stream; the agent subscribes again and gets a snapshot.
                logger.warning(
                    "agent not keeping up; resyncing it", extra={"agent": agent.agent_id}
                )
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)
                agent.queue = None
        return sent

    def hold(self, agent_id: str, stream: str, splits: set[str]) -> None:
        agent = self._agents.get(agent_id)
        if agent is not None:
            agent.holdings[stream] = splits

    @staticmethod
    async def persisted(etcd: EtcdClient, prefix: str) -> list[Agent]:
        """The registrations the leader keeps in etcd (what a standby can
        tell: who, since when; not what each applied)."""
        kvs, _ = await etcd.get_prefix(f"{prefix}/readers/")
        agents = []
        for kv in kvs:
            try:
                doc = json.loads(kv.value)
                agent_id = kv.key.rsplit("/", 1)[-1]
                agents.append(
                    Agent(agent_id, str(doc["host"]), int(doc["pid"]), int(doc["registered_ms"]))
                )
            except MALFORMED:
                logger.warning("unreadable reader registration ignored", extra={"key": kv.key})
        return sorted(agents, key=lambda a: a.agent_id)

    async def _persist(self, agent: Agent) -> None:
        doc = {"host": agent.host, "pid": agent.pid, "registered_ms": agent.registered_ms}
        await self._etcd.put(
            self._prefix + agent.agent_id, json.dumps(doc).encode(), lease=self._lease
        )

    async def _keepalive(self) -> None:
        """Keep the registrations' lease alive and expire agents that missed
        their heartbeats."""
        try:
            if self._lease is not None and await self._etcd.refresh_lease(self._lease) <= 0:
                self._lease = await self._etcd.grant_lease(max(int(self._ttl_s), 2))
                for agent in self._agents.values():
                    await self._persist(agent)
        except UnavailableError as exc:
            logger.warning("cannot keep reader registrations alive: %s", exc)
        now = time.monotonic()
        for agent in [a for a in self._agents.values() if now - a.last_heartbeat > self._ttl_s]:
            logger.info("reader agent expired", extra={"agent": agent.agent_id})
            del self._agents[agent.agent_id]
            if agent.queue is not None:
                agent.queue.put_nowait(None)
            for listener in self.on_expired:
                listener(agent)
            with contextlib.suppress(UnavailableError):
                await self._etcd.delete(self._prefix + agent.agent_id)
