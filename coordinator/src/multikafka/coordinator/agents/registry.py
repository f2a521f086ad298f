"""Registered reader agents: who they are, what generation they applied, which
sub-readers and splits they hold, and their event mailboxes.

Registrations are written to ``<prefix>/readers/<agent id>`` under one lease
the coordinator keeps alive, so they vanish with a coordinator that dies, and
are removed by the coordinator when an agent misses heartbeats. Everything
kept per agent lives on its :class:`Agent` and goes with it.

A reconcile event reaches a thousand agents: it is serialized once
(:class:`Outgoing`), and each agent's :class:`Mailbox` holds at most one
undelivered event. Events that arrive while an agent's stream is still busy
are merged into it (a cluster's desired state is absolute, so the latest
entry per cluster is all the agent needs), so a slow agent never holds a
backlog and never has to be resynced.

An agent sees only the streams its principal may read (:func:`visible`):
an event is filtered once per set of principals, not per agent, and goes
out unfiltered where nothing is checked or to an admin.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from multikafka.coordinator.access import Caller, Rights, Role
from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.core._background import BackgroundTasks
from multikafka.core._recent import Recent
from multikafka.core.exceptions import UnavailableError
from multikafka.v1 import reader_pb2

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outgoing:
    """A reconcile event and its bytes on the wire, serialized once for
    every agent it goes to."""

    event: reader_pb2.ReconcileEvent
    payload: bytes
    #: The lowest generation it carries (several when merged).
    first: int

    @classmethod
    def of(cls, event: reader_pb2.ReconcileEvent) -> Outgoing:
        return cls(event, event.SerializeToString(), event.generation)

    @property
    def generation(self) -> int:
        return int(self.event.generation)


def merge(older: Outgoing, newer: Outgoing) -> Outgoing:
    """One event that leaves an agent where ``older`` then ``newer`` would:
    per (stream, cluster) the newer desired state, the newer generation, and
    the time the older change was seen."""
    clusters = {(d.stream, d.cluster): d for d in older.event.clusters}
    clusters.update({(d.stream, d.cluster): d for d in newer.event.clusters})
    event = reader_pb2.ReconcileEvent(
        generation=max(older.generation, newer.generation),
        snapshot=older.event.snapshot or newer.event.snapshot,
        clusters=list(clusters.values()),
        observed_ms=older.event.observed_ms or newer.event.observed_ms,
    )
    return Outgoing(event, event.SerializeToString(), min(older.first, newer.first))


def visible(item: Outgoing, rights: Rights | None, cache: dict[Rights, Outgoing]) -> Outgoing:
    """``item`` as an agent with ``rights`` may see it: only the clusters of
    streams it may read (the generation and time stay: agents track the
    generation even when nothing they hold changed). Made once per rights
    (``cache``) for all the agents that share them."""
    if rights is None or rights.admin:
        return item
    seen = cache.get(rights)
    if seen is not None:
        return seen
    clusters = [d for d in item.event.clusters if rights.may(Role.READER, d.stream)]
    if len(clusters) == len(item.event.clusters):
        seen = item
    else:
        event = reader_pb2.ReconcileEvent(
            generation=item.event.generation,
            snapshot=item.event.snapshot,
            clusters=clusters,
            observed_ms=item.event.observed_ms,
        )
        seen = Outgoing(event, event.SerializeToString(), item.first)
    cache[rights] = seen
    return seen


class Mailbox:
    """What one agent's subscription has yet to send: one (merged) event,
    or the end of the subscription."""

    __slots__ = ("_closed", "_pending", "_waiter")

    def __init__(self) -> None:
        self._pending: Outgoing | None = None
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, item: Outgoing) -> None:
        pending = self._pending
        self._pending = item if pending is None else merge(pending, item)
        self._wake()

    def close(self) -> None:
        """End the subscription once what is pending was sent."""
        self._closed = True
        self._wake()

    def take(self) -> Outgoing | None:
        """The pending event, if any (it is then no longer pending)."""
        item, self._pending = self._pending, None
        return item

    async def get(self) -> Outgoing | None:
        """The next event to send; None once the mailbox is closed."""
        while self._pending is None and not self._closed:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


#: How long a split an agent reported reading counts as one it holds.
HOLDING_S = 30.0


@dataclass
class Agent:
    agent_id: str
    host: str
    pid: int
    registered_ms: int
    #: How the agent converts Kafka messages into Arrow (c-direct,
    #: c-accessors, python; "" from agents before it said).
    converter: str = ""
    last_heartbeat: float = field(default_factory=time.monotonic)
    last_heartbeat_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    applied_generation: int = 0
    #: Stats the agent last pushed, per "stream/cluster".
    sub_readers: dict[str, reader_pb2.SubReaderStats] = field(default_factory=dict)
    #: stream -> split ids the agent reported reading lately (a
    #: micro-batch's tasks each report some).
    holdings: dict[str, Recent] = field(default_factory=dict)
    #: "stream/cluster" -> the pushed counters the metrics already count
    #: (records read, restarts, then malformed: dropped, corrupt, failed).
    counted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: Events for its subscription (None while it has none).
    queue: Mailbox | None = None
    #: Who registered it (its principals, "" where nothing is checked), and
    #: the caller whose rights filter its events (None: it sees everything).
    principal: str = ""
    caller: Caller | None = None
    #: The rights its subscription's events are filtered with.
    rights: Rights | None = None

    def rights_now(self) -> Rights | None:
        """Its caller's rights under the policy in force (None: everything);
        :class:`MultikafkaError` once the policy no longer knows it."""
        return self.caller.rights if self.caller is not None else None

    def held(self, stream: str) -> list[str]:
        """Splits of ``stream`` the agent reported reading in the last
        :data:`HOLDING_S` seconds."""
        recent = self.holdings.get(stream)
        splits = recent.names() if recent is not None else []
        if recent is not None and not splits:
            del self.holdings[stream]
        return splits


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
                agent.queue.close()
        if self._lease is not None:
            with contextlib.suppress(UnavailableError):
                await self._etcd.revoke_lease(self._lease)

    async def register(
        self, agent_id: str, host: str, pid: int, converter: str = "", caller: Caller | None = None
    ) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = Agent(agent_id, host, pid, int(time.time() * 1000))
            logger.info(
                "reader agent registered", extra={"agent": agent_id, "host": host, "pid": pid}
            )
        agent.converter = converter  # what it says now, also when it registers again
        agent.caller = caller
        agent.principal = caller.name if caller is not None else ""
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
        if stats or agent.sub_readers:
            agent.sub_readers = {f"{s.stream}/{s.cluster}": s for s in stats}
            # Counters the agent dropped (cluster gone) start again from 0
            # if it comes back: forget what the metrics counted of them.
            for key in [k for k in agent.counted if k not in agent.sub_readers]:
                del agent.counted[key]
        self._applied(agent, applied)
        return agent

    def acknowledge(self, agent_id: str, applied: int) -> Agent | None:
        """``agent_id`` applied generation ``applied`` (liveness stays with
        heartbeats); None if it is not registered."""
        agent = self._agents.get(agent_id)
        if agent is not None:
            self._applied(agent, applied)
        return agent

    def _applied(self, agent: Agent, applied: int) -> None:
        if applied > agent.applied_generation:
            agent.applied_generation = applied
            for listener in self._applied_listeners:
                listener(agent)

    def subscribe(self, agent_id: str) -> Mailbox:
        agent = self._agents[agent_id]
        if agent.queue is not None:
            agent.queue.close()  # end the previous subscription
        agent.queue = Mailbox()
        agent.rights = agent.rights_now()
        return agent.queue

    def rights_changed(self) -> int:
        """End the subscriptions of agents whose rights the policy in force
        changed (they subscribe again, and see what they may now, or are
        refused); returns how many."""
        ended = 0
        for agent in self._agents.values():
            if agent.queue is None or agent.caller is None:
                continue
            if agent.caller.same_rights(agent.rights):
                # The same grants under a new policy: its events are filtered
                # by the policy's new rights object from now on.
                agent.rights = agent.rights_now()
                continue
            agent.queue.close()
            ended += 1
        return ended

    def unsubscribe(self, agent_id: str, mailbox: Mailbox) -> None:
        agent = self._agents.get(agent_id)
        if agent is not None and agent.queue is mailbox:
            agent.queue = None

    def subscribed(self) -> list[Agent]:
        return [a for a in self._agents.values() if a.queue is not None]

    def broadcast(self, event: reader_pb2.ReconcileEvent | Outgoing) -> int:
        """Hand ``event`` (serialized once) to every subscribed agent;
        returns how many."""
        item = event if isinstance(event, Outgoing) else Outgoing.of(event)
        sent = 0
        seen: dict[Rights, Outgoing] = {}
        for agent in self._agents.values():
            if agent.queue is not None:
                agent.queue.put(visible(item, agent.rights, seen))
                sent += 1
        return sent

    def hold(self, agent_id: str, stream: str, splits: set[str]) -> None:
        agent = self._agents.get(agent_id)
        if agent is not None:
            agent.holdings.setdefault(stream, Recent(HOLDING_S)).touch(splits)

    def forget_stream(self, stream: str) -> None:
        """Drop what agents are known to hold of a deleted stream."""
        prefix = f"{stream}/"
        for agent in self._agents.values():
            agent.holdings.pop(stream, None)
            for key in [k for k in agent.counted if k.startswith(prefix)]:
                del agent.counted[key]

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
                    Agent(
                        agent_id,
                        str(doc["host"]),
                        int(doc["pid"]),
                        int(doc["registered_ms"]),
                        str(doc.get("converter", "")),
                    )
                )
            except MALFORMED:
                logger.warning("unreadable reader registration ignored", extra={"key": kv.key})
        return sorted(agents, key=lambda a: a.agent_id)

    async def _persist(self, agent: Agent) -> None:
        doc = {
            "host": agent.host,
            "pid": agent.pid,
            "registered_ms": agent.registered_ms,
            "converter": agent.converter,
        }
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
                agent.queue.close()
            for listener in self.on_expired:
                listener(agent)
            with contextlib.suppress(UnavailableError):
                await self._etcd.delete(self._prefix + agent.agent_id)
