"""Periodic checks that act without being asked:

* automatic failover: a stream with ``auto_failover`` whose ACTIVE cluster has
  been unreachable for the configured window fails over to its standby, and
  the history says why;
* drains: a DRAINING cluster whose end offsets could not be captured yet is
  tried again, and once every query of the stream has read a drained cluster
  to its end, the history records that the cluster can be removed.
"""

from __future__ import annotations

import logging
import time

from coordinator.discovery import Discovery
from coordinator.history import History
from coordinator.metadata import MetadataStore
from coordinator.operations import ClusterOperations
from coordinator.queries import QueryStore
from coordinator.stream_state import StreamView
from multikafka_core.background import BackgroundTasks
from multikafka_core.exceptions import MultikafkaError
from multikafka_core.model import ClusterState

logger = logging.getLogger(__name__)


class Supervisor:
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        operations: ClusterOperations,
        queries: QueryStore,
        history: History,
        *,
        interval_s: float = 1.0,
    ) -> None:
        self._store = store
        self._discovery = discovery
        self._ops = operations
        self._queries = queries
        self._history = history
        self._interval_s = interval_s
        self._tasks = BackgroundTasks("supervisor")
        self._drained: set[tuple[str, str, frozenset[tuple[str, int]]]] = set()

    def start(self) -> None:
        self._tasks.every("checks", self._interval_s, self.check_all)

    async def stop(self) -> None:
        await self._tasks.stop()

    async def check_all(self) -> None:
        """One round of checks over every stream (one stream's failure does
        not keep the others from being checked)."""
        for view in self._store.views():
            try:
                await self.check(view)
            except MultikafkaError as exc:
                logger.warning(
                    "supervisor check failed", extra={"stream": view.name, "error": str(exc)}
                )

    async def check(self, view: StreamView) -> None:
        await self._auto_failover(view)
        for cid, spec in view.spec.clusters.items():
            if spec.state is not ClusterState.DRAINING:
                continue
            if cid not in view.status.drains:
                await self._ops.drain(view.name, cid)
            else:
                self._drain_progress(view, cid)

    async def _auto_failover(self, view: StreamView) -> None:
        auto = view.spec.auto_failover
        if auto is None:
            return
        standby = view.spec.clusters.get(auto.standby)
        if standby is None or standby.state is not ClusterState.STANDBY:
            return
        for cid, spec in view.spec.clusters.items():
            if spec.state is not ClusterState.ACTIVE:
                continue
            cc = self._discovery.client(view.name, cid)
            if cc is None:
                continue
            if cc.health.reachable:
                # Probe idle clusters too: nobody else may be asking them.
                await self._discovery.discover(cc)
            since = cc.health.unreachable_since
            if cc.health.reachable or since is None:
                continue
            down_ms = (time.monotonic() - since) * 1000
            if down_ms < auto.unreachable_after_ms:
                # Keep probing so recovery (or a longer outage) is noticed.
                await self._discovery.discover(cc, force=True)
                continue
            reason = (
                f"{cid} unreachable for {down_ms / 1000:.1f}s (window {auto.unreachable_after_ms / 1000:.1f}s): "
                f"{cc.health.error}"
            )
            logger.warning(
                "automatic failover", extra={"stream": view.name, "cluster": cid, "reason": reason}
            )
            await self._ops.failover(
                view.name,
                cid,
                auto.standby,
                strategy=auto.strategy,
                margin_ms=auto.margin_ms,
                reason=reason,
                automatic=True,
            )
            return

    def _drain_progress(self, view: StreamView, cluster: str) -> None:
        ends = view.status.drains[cluster]
        # One drain is its captured end offsets; edits of the document while
        # it runs do not make it another one.
        key = (view.name, cluster, frozenset(ends.items()))
        if key in self._drained:
            return
        queries = self._queries.running(view.name)
        if not queries:
            return
        # Done when no query holds a drained split any more: each read it to
        # the captured end and retired it.
        if any(split in q.offsets for q in queries for split in ends):
            return
        self._drained.add(key)
        self._history.record(
            view.name,
            "drain-complete",
            cluster=cluster,
            detail=f"every query ({len(queries)}) read {cluster} to its drain offsets and retired its splits; it can be removed",
            generation=view.generation,
        )
