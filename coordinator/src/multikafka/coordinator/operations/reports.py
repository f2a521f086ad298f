"""What every replica tells operators: streams and their clusters, a
stream's history, reader agents and query progress.

The leader answers from its term (:class:`LeaderReports`: discovery's view
of each cluster, the metrics it counts, the stores it writes); a standby
from its copy of the metadata and from what the leader persisted in etcd
(:class:`StandbyReports`). Either way one call per question.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from multikafka.coordinator.agents.registry import Agent, AgentRegistry
from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.etcd import EtcdClient
from multikafka.coordinator.state.history import Entry, History
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.queries import QueryProgress, QueryStore
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core.model import ClusterState

__all__ = ["ClusterReport", "LeaderReports", "Reports", "StandbyReports", "StreamReport"]


@dataclass(frozen=True)
class ClusterReport:
    """One cluster of a stream as this replica knows it."""

    cluster: str
    state: ClusterState
    reachable: bool
    #: Why it is not reachable (or why this replica cannot tell).
    error: str
    partitions: int
    #: End offsets captured when it began DRAINING.
    drain_offsets: Mapping[str, int]
    #: Since when it has been unreachable (0: it is not).
    unreachable_since_ms: int
    records_read: int
    records_planned: int
    #: Records behind the high watermarks (None: not known, or not read).
    lag_records: int | None


@dataclass(frozen=True)
class StreamReport:
    view: StreamView
    clusters: list[ClusterReport]


class Reports(abc.ABC):
    """The questions, the same on every replica."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    def stream(self, name: str) -> StreamReport:
        """``name`` (:class:`NotFoundError` when there is no such stream)."""
        return self.describe(self._store.get(name))

    def streams(self) -> list[StreamReport]:
        return [self.describe(view) for view in self._store.views()]

    @abc.abstractmethod
    def describe(self, view: StreamView) -> StreamReport: ...

    async def history(self, name: str, limit: int = 0) -> list[Entry]:
        """The last ``limit`` entries (0: all kept) of the stream's history;
        :class:`NotFoundError` for a stream that has none and does not exist."""
        entries = (await self._kept_history()).entries(name, limit)
        if not entries:
            self._store.get(name)  # NOT_FOUND for a stream that never existed
        return entries

    @abc.abstractmethod
    async def _kept_history(self) -> History: ...

    @abc.abstractmethod
    async def readers(self) -> list[Agent]:
        """The registered reader agents."""

    @abc.abstractmethod
    async def queries(self) -> list[QueryProgress]:
        """The progress of every query that committed."""


class LeaderReports(Reports):
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        metrics: Metrics,
        history: History,
        queries: QueryStore,
        registry: AgentRegistry,
    ) -> None:
        super().__init__(store)
        self._discovery = discovery
        self._metrics = metrics
        self._history = history
        self._queries = queries
        self._registry = registry

    def describe(self, view: StreamView) -> StreamReport:
        m = self._metrics
        return describe(
            view,
            self._discovery,
            lag=m.per_cluster("lag", view.name),
            read=m.per_cluster("agent_records", view.name),
            planned=m.per_cluster("planned", view.name),
            unknown="not set up yet",
        )

    async def _kept_history(self) -> History:
        return self._history

    async def readers(self) -> list[Agent]:
        return self._registry.agents()

    async def queries(self) -> list[QueryProgress]:
        return self._queries.all()


class StandbyReports(Reports):
    """A standby's answers: documents and states from its copy of the
    metadata, the rest read from etcd at each question."""

    def __init__(
        self,
        store: MetadataStore,
        etcd: EtcdClient,
        prefix: str,
        history_size: int,
        leader: Callable[[], str],
    ) -> None:
        super().__init__(store)
        self._etcd = etcd
        self._prefix = prefix
        self._history_size = history_size
        #: The leader's address ("" while there is none).
        self._leader = leader

    def describe(self, view: StreamView) -> StreamReport:
        unknown = f"unknown here: this replica is a standby (leader: {self._leader() or 'none'})"
        return describe(view, None, lag={}, read={}, planned={}, unknown=unknown)

    async def _kept_history(self) -> History:
        history = History(self._etcd, self._prefix, self._history_size)
        await history.load()
        return history

    async def readers(self) -> list[Agent]:
        return await AgentRegistry.persisted(self._etcd, self._prefix)

    async def queries(self) -> list[QueryProgress]:
        queries = QueryStore(self._etcd, self._prefix)
        await queries.load()
        return queries.all()


def describe(
    view: StreamView,
    discovery: Discovery | None,
    *,
    lag: Mapping[str, float],
    read: Mapping[str, float],
    planned: Mapping[str, float],
    unknown: str,
) -> StreamReport:
    """``view`` with what ``discovery`` knows of each cluster (``unknown``:
    the error of a cluster it has no client for) and the counts given (the
    lag gauge keeps its last value: shown only while the cluster is read)."""
    clusters = []
    for cid, spec in sorted(view.spec.clusters.items()):
        cc = discovery.client(view.name, cid) if discovery is not None else None
        since_ms = 0
        if cc is not None:
            reachable = cc.health.reachable and cc.discovered
            error = cc.health.error
            partitions = sum(cc.partitions.values())
            if cc.health.unreachable_since is not None:
                ago_s = time.monotonic() - cc.health.unreachable_since
                since_ms = int((time.time() - ago_s) * 1000)
        else:
            reachable, partitions, error = False, 0, unknown
        clusters.append(
            ClusterReport(
                cluster=cid,
                state=spec.state,
                reachable=reachable,
                error=error,
                partitions=partitions,
                drain_offsets=view.status.drains.get(cid, {}),
                unreachable_since_ms=since_ms,
                records_read=int(read.get(cid, 0)),
                records_planned=int(planned.get(cid, 0)),
                lag_records=int(lag[cid]) if cid in lag and spec.state.readable else None,
            )
        )
    return StreamReport(view, clusters)
