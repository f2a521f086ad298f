"""The lifecycle of every stream's clusters, in one place.

* Asked by an admin: drain (planned migration), fail, activate, failover.
* Found by its own checks (every second, and at once when the metadata
  watch wakes it): automatic failover after an unreachability window; the
  drain offsets of a cluster set DRAINING in the document by hand; and
  ``drain-complete`` once every running query retired a drained cluster.

It owns every write of cluster states and of the stream status that goes
with them (drain offsets, failover records): :meth:`ClusterLifecycle._commit`
writes both in one etcd transaction, conditional on the versions it read, so
whoever sees the new states also finds what they need to act on them, and an
operation that lost a race writes nothing. It runs on its own task, never
inside the metadata watch (the watch only calls :meth:`wake`), and only on
the leader: it is one of the leader's duties, and its writes are fenced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.state.stream_status import FailoverRecord, StreamStatus, StreamView
from multikafka.core._background import BackgroundTasks
from multikafka.core._offsets import clusters_of
from multikafka.core.exceptions import (
    MultikafkaError,
    NotFoundError,
    PreconditionError,
    UnavailableError,
    ValidationError,
)
from multikafka.core.model import DEFAULT_MARGIN_MS, ClusterState, FailoverStrategy, StreamSpec

logger = logging.getLogger(__name__)


class ClusterLifecycle:
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        queries: QueryStore,
        history: History,
        metrics: Metrics,
        *,
        interval_s: float = 1.0,
        mm2_coverage: Callable[[StreamView, str], str] | None = None,
    ) -> None:
        self._store = store
        #: What an ``mm2`` failover into a cluster can translate with (one
        #: line for its record), from the syncs the leader keeps.
        self._mm2_coverage = mm2_coverage
        self._discovery = discovery
        self._queries = queries
        self._history = history
        self._metrics = metrics
        self._interval_s = interval_s
        self._tasks = BackgroundTasks("lifecycle")
        self._wake = asyncio.Event()
        #: Drains whose completion was recorded: (stream, cluster, captured offsets).
        self._drained: set[tuple[str, str, frozenset[tuple[str, int]]]] = set()

    # -- running ------------------------------------------------------------------

    def start(self) -> None:
        self._tasks.every("checks", self._interval_s, self.check_all, wake=self._wake)

    async def stop(self) -> None:
        await self._tasks.stop()

    def wake(self) -> None:
        """Check now (a change needs work, e.g. a cluster set DRAINING by hand)."""
        self._wake.set()

    @property
    def woken(self) -> bool:
        """Whether a check was asked for and has not run yet."""
        return self._wake.is_set()

    # -- operations an admin asks for ------------------------------------------------

    async def drain(self, stream: str, cluster: str) -> StreamView:
        """Capture the cluster's end offsets and mark it DRAINING: queries read
        it up to there, then retire its splits."""
        view = self._cluster_of(stream, cluster)
        state = view.spec.clusters[cluster].state
        if state is ClusterState.DRAINING and cluster in view.status.drains:
            return view
        if state is not ClusterState.ACTIVE and state is not ClusterState.DRAINING:
            raise PreconditionError(
                f"cluster {cluster!r} is {state.value}; only an ACTIVE cluster can be drained"
            )
        offsets = await self._capture(view, cluster)
        status = replace(view.status, drains={**view.status.drains, cluster: offsets})
        rev = await self._commit(
            view, status, _with_state(view.spec, {cluster: ClusterState.DRAINING})
        )
        self._metrics.drains.labels(stream, cluster).inc()
        self._history.record(
            stream,
            "drain",
            cluster=cluster,
            detail=f"reading up to {sum(offsets.values())} records' end offsets captured over {len(offsets)} splits, then retiring"
            + self._mirrors_note(self._store.get(stream), cluster),
            generation=rev,
        )
        return self._store.get(stream)

    def _mirrors_note(self, view: StreamView, cluster: str) -> str:
        """For the drain's history: the MM2 replicas of ``cluster``, whose
        splits start at its drain end offsets translated."""
        mirrors = [
            c for c, spec in view.spec.clusters.items() if spec.mm2 and spec.mm2.source == cluster
        ]
        return "".join(
            f"; {m} (MM2 replica) starts at the drain ends translated"
            + (f": {self._mm2_coverage(view, m)}" if self._mm2_coverage else "")
            for m in sorted(mirrors)
        )

    async def fail(self, stream: str, cluster: str, reason: str = "") -> StreamView:
        """Mark the cluster FAILED: not read; ranges planned on it are abandoned."""
        view = self._cluster_of(stream, cluster)
        rev = await self._commit(
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
        """Mark the cluster ACTIVE (dropping a drain of it)."""
        view = self._cluster_of(stream, cluster)
        if view.spec.clusters[cluster].state is ClusterState.FAILED:
            self._check_retired(view, cluster)
        drains = {c: o for c, o in view.status.drains.items() if c != cluster}
        rev = await self._commit(
            view,
            replace(view.status, drains=drains),
            _with_state(view.spec, {cluster: ClusterState.ACTIVE}),
        )
        self._history.record(
            stream, "activate", cluster=cluster, detail="marked ACTIVE by admin", generation=rev
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
        margin_ms: int = DEFAULT_MARGIN_MS,
        reason: str = "",
        automatic: bool = False,
    ) -> StreamView:
        """Replace ``from_cluster`` by ``to_cluster``: the failover record
        tells each query where the new cluster's splits start."""
        view, record = self.failover_record(
            stream,
            from_cluster,
            to_cluster,
            strategy=strategy,
            margin_ms=margin_ms,
            reason=reason,
            automatic=automatic,
        )
        if record is None:
            return view  # already done
        status = replace(
            view.status,
            failovers=(*view.status.failovers, record),
            drains={c: o for c, o in view.status.drains.items() if c != to_cluster},
        )
        spec = _with_state(
            view.spec, {from_cluster: ClusterState.FAILED, to_cluster: ClusterState.ACTIVE}
        )
        # Recorded before the change applies here: the planner translates as
        # soon as it sees the change, and its entries come after this one.
        rev = await self._store.update(view, status, spec)
        mode = "automatic" if automatic else "admin"
        self._metrics.failovers.labels(stream, from_cluster, to_cluster, mode).inc()
        self._history.record(
            stream,
            "auto-failover" if automatic else "failover",
            cluster=from_cluster,
            detail=f"{from_cluster} -> {to_cluster}, strategy {strategy.value}, margin {margin_ms} ms"
            + (f": {reason}" if reason else "")
            + (f" ({record.note})" if record.note else ""),
            generation=rev,
        )
        await self._store.wait_applied(rev)
        return self._store.get(stream)

    def failover_record(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: FailoverStrategy = FailoverStrategy.TIMESTAMP,
        margin_ms: int = DEFAULT_MARGIN_MS,
        reason: str = "",
        automatic: bool = False,
    ) -> tuple[StreamView, FailoverRecord | None]:
        """The stream, and the record of the failover asked for, checked but
        not made (None: it is done already)."""
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
            return view, None
        record = FailoverRecord(
            from_cluster,
            to_cluster,
            strategy,
            margin_ms,
            int(time.time() * 1000),
            reason,
            automatic,
            self._translation_note(view, from_cluster, to_cluster, strategy, automatic),
        )
        return view, record

    def _translation_note(
        self,
        view: StreamView,
        from_cluster: str,
        to_cluster: str,
        strategy: FailoverStrategy,
        automatic: bool,
    ) -> str:
        """What an ``mm2`` failover translates with, for its record. An admin
        asking for ``mm2`` into a cluster that is no MM2 replica of the failed
        one is refused; an automatic failover goes on with ``timestamp``."""
        if strategy is not FailoverStrategy.MM2:
            return ""
        mirror = view.spec.clusters[to_cluster].mm2
        if mirror is None or mirror.source != from_cluster:
            problem = f"{to_cluster!r} is no MirrorMaker 2 replica of {from_cluster!r} " + (
                "(it has no mm2 block)"
                if mirror is None
                else f"(its mm2 source is {mirror.source!r})"
            )
            if not automatic:
                raise ValidationError(
                    "strategy", f"mm2: {problem}; fix the stream document or use timestamp"
                )
            return f"{problem}: every split falls back to timestamp"
        return self._mm2_coverage(view, to_cluster) if self._mm2_coverage else ""

    # -- checks ------------------------------------------------------------------------

    async def check_all(self) -> None:
        """One round of checks over every stream (one stream's failure does
        not keep the others from being checked)."""
        for view in self._store.views():
            try:
                await self.check(view)
            except MultikafkaError as exc:
                logger.warning(
                    "lifecycle check failed", extra={"stream": view.name, "error": str(exc)}
                )

    async def check(self, view: StreamView) -> None:
        await self._auto_failover(view)
        for cid, spec in view.spec.clusters.items():
            if spec.state is not ClusterState.DRAINING:
                continue
            if cid not in view.status.drains:
                await self.drain(view.name, cid)  # set DRAINING by hand: capture its end
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
            await self.failover(
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

    # -- reads and writes ------------------------------------------------------------

    def _cluster_of(self, stream: str, cluster: str) -> StreamView:
        view = self._store.get(stream)
        if cluster not in view.spec.clusters:
            raise NotFoundError(f"stream {stream!r} has no cluster {cluster!r}")
        return view

    async def _capture(self, view: StreamView, cluster: str) -> dict[str, int]:
        """The end offsets of every split of ``cluster``, now."""
        cc = self._discovery.client(view.name, cluster)
        if cc is None or not await self._discovery.discover(cc, force=True):
            raise PreconditionError(
                f"cluster {cluster!r} is unreachable, so its end offsets cannot be captured for a drain; "
                "use failover for a cluster that is down"
            )
        try:
            return await self._discovery.cluster_offsets(
                view.name, cluster, cc.splits(), OffsetQuery.latest()
            )
        except UnavailableError as exc:
            raise PreconditionError(
                f"cluster {cluster!r}: cannot capture drain offsets: {exc}"
            ) from exc

    async def _commit(self, view: StreamView, status: StreamStatus, spec: StreamSpec) -> int:
        """The one write of this module: status and document together,
        conditional on ``view``'s versions; waits until applied."""
        rev = await self._store.update(view, status, spec)
        await self._store.wait_applied(rev)
        return rev


def _with_state(spec: StreamSpec, states: dict[str, ClusterState]) -> StreamSpec:
    clusters = {cid: replace(c, state=states.get(cid, c.state)) for cid, c in spec.clusters.items()}
    return replace(spec, clusters=clusters)
