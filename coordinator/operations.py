"""Cluster operations: drain, fail, activate, failover.

Each writes the coordinator's status (drain offsets, failover records) and the
document's cluster states in one etcd transaction, conditional on the versions
it read: whoever sees the new states also finds what they need to act on them,
and an operation that lost a race writes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from coordinator.discovery import Discovery
from coordinator.history import History
from coordinator.metadata import MetadataStore
from coordinator.metrics import Metrics
from coordinator.queries import QueryStore
from coordinator.stream_state import FailoverRecord, StreamStatus, StreamView
from multikafka_core.exceptions import (
    NotFoundError,
    PreconditionError,
    UnavailableError,
    ValidationError,
)
from multikafka_core.model import ClusterState, FailoverStrategy, StreamSpec
from multikafka_core.offsets import clusters_of
from multikafka_core.providers import OffsetQuery

logger = logging.getLogger(__name__)


class ClusterOperations:
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        queries: QueryStore,
        history: History,
        metrics: Metrics,
    ) -> None:
        self._store = store
        self._queries = queries
        self._discovery = discovery
        self._history = history
        self._metrics = metrics

    def _cluster_of(self, stream: str, cluster: str) -> StreamView:
        view = self._store.get(stream)
        if cluster not in view.spec.clusters:
            raise NotFoundError(f"stream {stream!r} has no cluster {cluster!r}")
        return view

    async def capture_drain(self, view: StreamView, cluster: str) -> dict[str, int]:
        """The end offsets of every split of ``cluster``, now."""
        cc = self._discovery.client(view.name, cluster)
        if cc is None or not await self._discovery.discover(cc, force=True):
            raise PreconditionError(
                f"cluster {cluster!r} is unreachable, so its end offsets cannot be captured for a drain; "
                "use failover for a cluster that is down"
            )
        splits = cc.splits()
        try:
            found = await self._discovery.offsets(
                cc, [(s.topic, s.partition) for s in splits], OffsetQuery.latest()
            )
        except UnavailableError as exc:
            raise PreconditionError(
                f"cluster {cluster!r}: cannot capture drain offsets: {exc}"
            ) from exc
        return {
            str(s): found[(s.topic, s.partition)] for s in splits if (s.topic, s.partition) in found
        }

    async def drain(self, stream: str, cluster: str) -> StreamView:
        view = self._cluster_of(stream, cluster)
        state = view.spec.clusters[cluster].state
        if state is ClusterState.DRAINING and cluster in view.status.drains:
            return view
        if state is not ClusterState.ACTIVE and state is not ClusterState.DRAINING:
            raise PreconditionError(
                f"cluster {cluster!r} is {state.value}; only an ACTIVE cluster can be drained"
            )
        offsets = await self.capture_drain(view, cluster)
        status = replace(view.status, drains={**view.status.drains, cluster: offsets})
        rev = await self._write(
            view, status, _with_state(view.spec, {cluster: ClusterState.DRAINING})
        )
        self._metrics.drains.labels(stream, cluster).inc()
        self._history.record(
            stream,
            "drain",
            cluster=cluster,
            detail=f"reading up to {sum(offsets.values())} records' end offsets captured over {len(offsets)} splits, then retiring",
            generation=rev,
        )
        return self._store.get(stream)

    async def fail(self, stream: str, cluster: str, reason: str = "") -> StreamView:
        view = self._cluster_of(stream, cluster)
        rev = await self._write(
            view, view.status, _with_state(view.spec, {cluster: ClusterState.FAILED})
        )
        self._history.record(
            stream,
            "fail",
            cluster=cluster,
            detail=reason or "marked FAILED by admin",
            generation=rev,
        )
        return self._store.get(stream)

    async def activate(self, stream: str, cluster: str) -> StreamView:
        view = self._cluster_of(stream, cluster)
        if view.spec.clusters[cluster].state is ClusterState.FAILED:
            self._check_retired(view, cluster)
        drains = {c: o for c, o in view.status.drains.items() if c != cluster}
        rev = await self._write(
            view,
            replace(view.status, drains=drains),
            _with_state(view.spec, {cluster: ClusterState.ACTIVE}),
        )
        self._history.record(
            stream,
            "activate",
            cluster=cluster,
            detail="marked ACTIVE by admin",
            generation=rev,
        )
        return self._store.get(stream)

    def _check_retired(self, view: StreamView, cluster: str) -> None:
        """A FAILED cluster comes back as a new start: its splits join running
        queries from its starting position. That is only sound once no running
        query still holds its splits from before (their offsets may not mean
        the same on the cluster that comes back)."""
        holding = [
            q.query_id
            for q in self._queries.running(view.name)
            if cluster in clusters_of(q.offsets)
        ]
        if holding:
            raise PreconditionError(
                f"queries {', '.join(sorted(holding))} still hold splits of {cluster!r} from before it failed; "
                "activate it once they have committed a batch since the failure (their splits then retire)"
            )

    async def failover(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: FailoverStrategy = FailoverStrategy.TIMESTAMP,
        margin_ms: int = 30_000,
        reason: str = "",
        automatic: bool = False,
    ) -> StreamView:
        view = self._cluster_of(stream, from_cluster)
        if to_cluster not in view.spec.clusters:
            raise NotFoundError(
                f"stream {stream!r} has no cluster {to_cluster!r}; add it (STANDBY) first"
            )
        if from_cluster == to_cluster:
            raise ValidationError("to_cluster", "must differ from from_cluster")
        if margin_ms < 0:
            raise ValidationError("margin_ms", "must not be negative")
        latest = view.status.failover_into(to_cluster)
        if (
            latest is not None
            and latest.from_cluster == from_cluster
            and view.spec.clusters[from_cluster].state is ClusterState.FAILED
            and view.spec.clusters[to_cluster].state is ClusterState.ACTIVE
        ):
            return view  # already done
        record = FailoverRecord(
            from_cluster,
            to_cluster,
            strategy,
            margin_ms,
            int(time.time() * 1000),
            reason,
            automatic,
        )
        status = replace(
            view.status,
            failovers=(*view.status.failovers, record),
            drains={c: o for c, o in view.status.drains.items() if c != to_cluster},
        )
        spec = _with_state(
            view.spec, {from_cluster: ClusterState.FAILED, to_cluster: ClusterState.ACTIVE}
        )
        rev = await self._write(view, status, spec)
        mode = "automatic" if automatic else "admin"
        self._metrics.failovers.labels(stream, from_cluster, to_cluster, mode).inc()
        self._history.record(
            stream,
            "auto-failover" if automatic else "failover",
            cluster=from_cluster,
            detail=f"{from_cluster} -> {to_cluster}, strategy {strategy.value}, margin {margin_ms} ms"
            + (f": {reason}" if reason else ""),
            generation=rev,
        )
        return self._store.get(stream)

    async def _write(self, view: StreamView, status: StreamStatus, spec: StreamSpec) -> int:
        """Write status and document together; wait until applied; return the revision."""
        rev = await self._store.update(view, status, spec)
        await self._store.wait_applied(rev)
        return rev


def _with_state(spec: StreamSpec, states: dict[str, ClusterState]) -> StreamSpec:
    clusters = {cid: replace(c, state=states.get(cid, c.state)) for cid, c in spec.clusters.items()}
    return replace(spec, clusters=clusters)
