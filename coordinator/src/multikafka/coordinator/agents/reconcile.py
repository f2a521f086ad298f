"""Reconciliation: from a metadata change to reconcile events at every agent.

For each applied change the reconciler works out which (stream, cluster)
pairs changed in a way agents care about (connection fingerprint or state, or
removal), pushes one event carrying the change's generation to every
subscribed agent (serialized once for all of them), and then brings partition
discovery in line: agents need nothing discovery finds, so they do not wait
for it. It measures how long it takes until every agent that was subscribed
has handed the event to gRPC (``fanouts``: the coordinator's own share) and
has applied it (``latencies``).

A deleted stream leaves nothing behind: its desired state, metric series,
history, what agents were known to hold of it, and (through ``forget``) the
leader's other per-stream state such as read marks.

A change that implies lifecycle work (a cluster set DRAINING by hand, whose
end offsets must be captured) only wakes the lifecycle, which does the work
on its own task, outside the watch.

One reconciler lives for one term of leadership: :meth:`start` takes the
stores' current state as a snapshot and follows changes from there.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from multikafka.coordinator.access import Rights
from multikafka.coordinator.agents.registry import Agent, AgentRegistry, Outgoing, visible
from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.metadata import MetadataChange, MetadataStore, Rejection
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core.model import ClusterState
from multikafka.v1 import common_pb2, reader_pb2

logger = logging.getLogger(__name__)

#: Generations whose acknowledgements are awaited at most: an agent that keeps
#: heartbeating without ever applying must not make the reconciler grow.
MAX_PENDING = 1024


@dataclass
class _Pending:
    observed: float
    waiting: set[str]
    #: Subscriptions that have yet to hand the event to gRPC.
    unsent: int = 0


def desired_of(view: StreamView | None) -> dict[str, reader_pb2.ClusterDesired]:
    """cluster -> desired sub-reader state, for one stream."""
    if view is None:
        return {}
    return {
        cid: reader_pb2.ClusterDesired(
            stream=view.name,
            cluster=cid,
            fingerprint=c.connection(cid).fingerprint,
            state=c.state.to_proto(),
        )
        for cid, c in view.spec.clusters.items()
    }


class Reconciler:
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        registry: AgentRegistry,
        wake_lifecycle: Callable[[], None],
        history: History,
        metrics: Metrics,
        forget: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._discovery = discovery
        self._registry = registry
        self._wake_lifecycle = wake_lifecycle
        self._history = history
        self._metrics = metrics
        self._forget = forget
        self._desired: dict[str, dict[str, reader_pb2.ClusterDesired]] = {}
        self._pending: dict[int, _Pending] = {}
        #: The snapshot new subscriptions get, serialized (built again after a change).
        self._snapshot: Outgoing | None = None
        #: The snapshot as each agent's rights may see it, for this generation.
        self._snapshots: dict[Rights, Outgoing] = {}
        #: Recent reconcile latencies (seconds), for benchmarks and the admin API.
        self.latencies: deque[float] = deque(maxlen=10_000)
        #: Recent fan-out times (seconds): from seeing a change to the last
        #: subscription handing its event to gRPC.
        self.fanouts: deque[float] = deque(maxlen=10_000)
        self.generation = 0
        registry.on_applied(self.on_applied)
        registry.on_expired.append(self.on_applied)

    async def start(self) -> None:
        """Take every stream as it is now (discovery set up for each), then
        follow the store's changes."""
        async with self._store.applying():
            for view in self._store.views():
                await self._discovery.sync(view, view.name)
                self._desired[view.name] = desired_of(view)
                self._metrics.generation.labels(view.name).set(view.generation)
                self._metrics.set_cluster_states(view.name, _states(view))
                if _needs_drain(view):
                    self._wake_lifecycle()
            self.generation = self._store.revision
            self._store.on_change(self.on_change)
            self._store.on_rejection(self.on_rejection)

    def stop(self) -> None:
        self._store.forget_listener(self.on_change)
        self._store.forget_listener(self.on_rejection)

    def snapshot(self) -> reader_pb2.ReconcileEvent:
        """Every (stream, cluster)'s desired state, for a new subscription."""
        clusters = [d for per in self._desired.values() for d in per.values()]
        return reader_pb2.ReconcileEvent(
            generation=self.generation,
            snapshot=True,
            clusters=clusters,
            observed_ms=int(time.time() * 1000),
        )

    def snapshot_payload(self, rights: Rights | None = None) -> bytes:
        """:meth:`snapshot`, serialized, of the streams ``rights`` may read
        (None: all); built once per generation and rights (a thousand
        agents subscribing at once get the same bytes)."""
        if self._snapshot is None:
            self._snapshot = Outgoing.of(self.snapshot())
            self._snapshots.clear()
        if len(self._snapshots) > 1024:
            self._snapshots.clear()
        return visible(self._snapshot, rights, self._snapshots).payload

    async def on_change(self, change: MetadataChange) -> None:
        """Every applied change becomes one event (agents track the generation
        even when nothing they hold changed); its entries are the clusters
        whose connection or state changed, or that were removed."""
        seen = time.monotonic()  # latency runs from here to the last agent's acknowledgement
        self.generation = max(self.generation, change.revision)
        old = self._desired.get(change.name, {})
        new = desired_of(change.new)
        changed = [d for cid, d in new.items() if old.get(cid) != d]
        changed += [
            reader_pb2.ClusterDesired(
                stream=change.name, cluster=cid, fingerprint="", state=common_pb2.REMOVED
            )
            for cid in old
            if cid not in new
        ]
        if new:
            self._desired[change.name] = new
        else:
            self._desired.pop(change.name, None)
        self._snapshot = None
        self._push(change.revision, changed, seen)
        await self._discovery.sync(change.new, change.name)
        self._account(change, old, new)
        if change.new is None:
            self._deleted(change)
            return
        summary = describe(change)
        if summary:
            self._history.record(
                change.name, "reconcile", detail=summary, generation=change.revision
            )
        if _needs_drain(change.new):
            self._wake_lifecycle()

    def _deleted(self, change: MetadataChange) -> None:
        """Drop every per-stream state of a deleted stream (a stream of the
        same name created later starts afresh)."""
        logger.info("stream deleted", extra={"stream": change.name, "generation": change.revision})
        self._history.forget(change.name)
        self._registry.forget_stream(change.name)
        if self._forget is not None:
            self._forget(change.name)

    async def on_rejection(self, rejection: Rejection) -> None:
        self._metrics.rejected.labels(rejection.name).inc()
        self._history.record(
            rejection.name,
            "rejected",
            detail=f"invalid document at revision {rejection.revision} ignored: {rejection.error}",
            generation=rejection.revision,
        )

    def _push(self, generation: int, changed: list[reader_pb2.ClusterDesired], seen: float) -> None:
        event = reader_pb2.ReconcileEvent(
            generation=generation,
            snapshot=False,
            clusters=changed,
            observed_ms=int(time.time() * 1000),
        )
        subscribed = self._registry.subscribed()
        waiting = {a.agent_id for a in subscribed if a.applied_generation < generation}
        sent = self._registry.broadcast(Outgoing.of(event))
        for cd in changed:
            self._metrics.reconciles.labels(cd.stream).inc()
        if waiting:
            self._pending[generation] = _Pending(seen, waiting, sent)
            while len(self._pending) > MAX_PENDING:
                del self._pending[min(self._pending)]  # its latency is never known

    def sent(self, item: Outgoing) -> None:
        """A subscription hands ``item`` to gRPC: the fan-out of a
        generation ends with its last subscription."""
        for gen in [g for g in self._pending if item.first <= g <= item.generation]:
            pending = self._pending[gen]
            pending.unsent -= 1
            if pending.unsent == 0:
                self.fanouts.append(time.monotonic() - pending.observed)

    def on_applied(self, agent: Agent) -> None:
        """An agent applied a generation (or went away): settle what it owed."""
        expired = self._registry.get(agent.agent_id) is None
        for gen in sorted(self._pending):
            if not expired and gen > agent.applied_generation:
                break
            pending = self._pending[gen]
            pending.waiting.discard(agent.agent_id)
            if not pending.waiting:
                del self._pending[gen]
                latency = time.monotonic() - pending.observed
                self.latencies.append(latency)
                self._metrics.reconcile_latency.observe(latency)

    def _account(
        self,
        change: MetadataChange,
        old: dict[str, reader_pb2.ClusterDesired],
        new: dict[str, reader_pb2.ClusterDesired],
    ) -> None:
        if change.new is None:
            self._metrics.forget_stream(change.name, list(old))
            return
        self._metrics.generation.labels(change.name).set(change.new.generation)
        self._metrics.set_cluster_states(change.name, _states(change.new))
        for cid in old:
            if cid not in new:
                self._metrics.forget_cluster(change.name, cid)
        for cc in self._discovery.clients(change.name):
            self._metrics.partitions.labels(change.name, cc.cluster).set(
                sum(cc.partitions.values())
            )


def _states(view: StreamView) -> dict[str, ClusterState]:
    return {cid: spec.state for cid, spec in view.spec.clusters.items()}


def _needs_drain(view: StreamView) -> bool:
    """A cluster is DRAINING without captured end offsets (set by hand)."""
    return any(
        spec.state is ClusterState.DRAINING and cid not in view.status.drains
        for cid, spec in view.spec.clusters.items()
    )


def describe(change: MetadataChange) -> str:
    """What a document change did, per cluster (empty for status-only changes)."""
    old = change.old.spec if change.old is not None else None
    new = change.new.spec if change.new is not None else None
    if old == new:
        return ""
    if new is None:
        return "stream deleted"
    parts = []
    old_clusters = old.clusters if old is not None else {}
    for cid, c in sorted(new.clusters.items()):
        before = old_clusters.get(cid)
        if before is None:
            parts.append(f"{cid}: added ({c.state.value}, topics {', '.join(c.topics)})")
            continue
        what = []
        if before.connection(cid).fingerprint != c.connection(cid).fingerprint:
            what.append("connection changed")
        if before.state is not c.state:
            what.append(f"{before.state.value} -> {c.state.value}")
        added = [t for t in c.topics if t not in before.topics]
        removed = [t for t in before.topics if t not in c.topics]
        if added:
            what.append(f"topics +{', +'.join(added)}")
        if removed:
            what.append(f"topics -{', -'.join(removed)}")
        if what:
            parts.append(f"{cid}: {'; '.join(what)}")
    parts += [f"{cid}: removed" for cid in sorted(old_clusters) if cid not in new.clusters]
    if old is not None and old.auto_failover != new.auto_failover:
        parts.append("auto_failover changed")
    return ", ".join(parts) or "no cluster changed"
