"""The Planner gRPC service: the driver side of the Spark source calls it to
resolve positions, plan micro-batches and report commits.

Offset vectors travel as columns (``OffsetColumns``) and are planned as
columns (:class:`~multikafka.core.offsets.SplitOffsets`), and a plan's ranges
travel as columns too (``RangeColumns``): a stream of 100,000 splits costs a
few numpy operations per call, not Python work per split.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from itertools import repeat
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from multikafka.coordinator.api.rpc import unary
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.planning.assignment import DEFAULT_MAX_RECORDS, cut_ranges
from multikafka.coordinator.planning.entry import Resumed
from multikafka.coordinator.planning.planner import (
    CLUSTER_REMOVED,
    ClusterSnapshot,
    EndPlan,
    cap_at_stops,
    new_split_set,
    plan_end,
)
from multikafka.coordinator.planning.stopping import stop_offsets, stops_of_clusters
from multikafka.coordinator.runtime.leader import LeaderDuties
from multikafka.coordinator.state.stream_state import StreamView
from multikafka.core import offsets as ov
from multikafka.core import ranges
from multikafka.core.exceptions import (
    PreconditionError,
    UnavailableError,
    ValidationError,
    shown,
)
from multikafka.core.model import SplitId
from multikafka.core.offsets import SplitOffsets, Splits
from multikafka.core.validation import validate_id, validate_name
from multikafka.v1 import common_pb2, planner_pb2, planner_pb2_grpc

if TYPE_CHECKING:
    from multikafka.coordinator.clusters.discovery import ClusterClient
    from multikafka.coordinator.runtime.server import Coordinator

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]
Position = planner_pb2.Position
#: Split ids named in one history entry about many splits.
SHOWN_SPLITS = 10


class PlannerService(planner_pb2_grpc.PlannerServicer):
    """Every call needs the leader (a standby raises :class:`NotLeaderError`,
    naming the leader for the client)."""

    def __init__(self, coordinator: Coordinator, *, readers_authenticated: bool) -> None:
        self._c = coordinator
        #: Whether callers proved they are readers (token or client
        #: certificate): only then does a task plan carry secrets.
        self._readers_authenticated = readers_authenticated

    def _view(self, stream: str) -> tuple[LeaderDuties, StreamView]:
        duties = self._c.leading()
        return duties, self._c.store.get(validate_name(stream, "stream"))

    # -- ResolveOffsets ------------------------------------------------------

    @unary
    async def ResolveOffsets(
        self, request: planner_pb2.ResolveOffsetsRequest, context: Ctx
    ) -> planner_pb2.ResolveOffsetsResponse:
        d, view = self._view(request.stream)
        pos = request.position
        kind = pos.kind or Position.EARLIEST
        readable = [d.discovery.require(view.name, cid) for cid in view.spec.readable_clusters()]
        await asyncio.gather(*(d.discovery.discover(cc) for cc in readable if not cc.discovered))
        specific = ov.EMPTY
        if kind == Position.SPECIFIC:
            specific = self._check_specific(view, pos.offsets)
            kind = pos.fallback or Position.EARLIEST
        timed = ov.EMPTY
        if pos.split_timestamps.partitions:
            timed = self._check_specific(
                view, pos.split_timestamps, "position.split_timestamps", special=False
            )
            both = timed.splits.positions(specific.splits)[1] if len(specific) else None
            if both is not None and both.any():
                s = specific.splits.select(both).ids()[0]
                raise ValidationError(
                    f"position.split_timestamps.{s}",
                    "also named in position.offsets: name each split in one of them",
                )
            if pos.no_match not in (0, Position.NO_MATCH_ERROR, Position.NO_MATCH_LATEST):
                raise ValidationError("position.no_match", "use NO_MATCH_ERROR or NO_MATCH_LATEST")
        earliest, latest = OffsetQuery.earliest(), OffsetQuery.latest()
        fallback = {
            Position.EARLIEST: earliest,
            Position.LATEST: latest,
            Position.TIMESTAMP: OffsetQuery.at_time(pos.timestamp_ms),
        }.get(kind)
        if fallback is None:
            raise ValidationError("position.kind", "use EARLIEST, LATEST, SPECIFIC or TIMESTAMP")
        if kind == Position.TIMESTAMP and pos.timestamp_ms < 0:
            raise ValidationError(
                "position.timestamp_ms", "must be milliseconds since the epoch, >= 0"
            )
        for cid in specific.splits.clusters():
            d.discovery.require(view.name, cid)  # UNAVAILABLE (the client retries) until set up
        splits = Splits.union([cc.split_table()[0] for cc in readable] + [specific.splits])
        given = specific.values_at(splits, np.full(len(splits), -3, dtype=np.int64))
        if len(timed):
            given[timed.positions_of(splits)[1]] = -4
        # -4: by its own time; -3: not named; -2 earliest, -1 latest (Spark's convention)
        lookups = [(fallback, given == -3), (earliest, given == -2), (latest, given == -1)]
        parts = [SplitOffsets(splits.select(given >= 0), given[given >= 0])]
        if len(timed):
            parts.extend(
                await _at_times(
                    d, view, timed, latest_if_none=pos.no_match == Position.NO_MATCH_LATEST
                )
            )
        # Splits of a cluster that does not answer are left out: they join the
        # query later, at their cluster's starting position.
        for query, mask in lookups:
            if mask.any():
                parts.extend(await _lookup_all(d, view, splits.select(mask), query))
        out = SplitOffsets.union(parts)
        # No position lies past a cluster's stop: a batch read ending at
        # "latest" ends there, a query starting at "latest" has nothing left.
        clients = {cc.cluster: cc for cc in readable}
        try:
            out = cap_at_stops(out, await stops_of_clusters(d.discovery, view, clients, out.splits))
        except UnavailableError as exc:
            raise UnavailableError(f"stream {view.name!r}: stopping offsets: {exc}") from exc
        return planner_pb2.ResolveOffsetsResponse(
            offsets=ov.to_columns(out), generation=view.generation
        )

    def _check_specific(
        self,
        view: StreamView,
        offsets: planner_pb2.OffsetColumns,
        field: str = "position.offsets",
        *,
        special: bool = True,
    ) -> SplitOffsets:
        """``offsets`` (offsets, or times with ``special=False``) checked:
        every split of a cluster and topic of the stream."""
        checked = ov.from_columns(offsets, field, allow_special=special)
        bounds = checked.splits.bounds().tolist()
        ids = checked.splits.ids()
        for g, (cluster, topic) in enumerate(checked.splits.groups):
            s = ids[bounds[g]]
            spec = view.spec.clusters.get(cluster)
            if spec is None:
                raise ValidationError(
                    f"{field}.{s}",
                    f"stream {view.name!r} has no cluster {shown(cluster)}",
                )
            if topic not in spec.topics:
                raise ValidationError(
                    f"{field}.{s}",
                    f"cluster {cluster!r} of stream {view.name!r} has no topic {shown(topic)}",
                )
        return checked

    # -- LatestOffsets -------------------------------------------------------

    @unary
    async def LatestOffsets(
        self, request: planner_pb2.LatestOffsetsRequest, context: Ctx
    ) -> planner_pb2.LatestOffsetsResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = ov.from_columns(request.start, "start")
        if request.max_records < 0:
            raise ValidationError("max_records", "must not be negative (0 means no limit)")
        cap = ov.from_columns(request.cap, "cap")
        snapshots = await snapshots_of(d, view, start)
        new = new_split_set(start, snapshots)
        abandoned = {}
        left: dict[str, SplitOffsets] = {}
        now_ms = int(time.time() * 1000)
        progress = d.queries.get(query_id)
        if progress is not None:
            abandoned = progress.abandoned
            await d.queries.forget_held(query_id, start, set(view.spec.clusters))
            left = progress.resumable(view.spec.retention_ms, now_ms)
        new_ids = new.ids()
        resumed = (
            await d.entry.resume(view, new_ids, left, fail_on_data_loss=request.fail_on_data_loss)
            if left and new_ids
            else Resumed()
        )
        rest = [s for s in new_ids if s not in resumed.claimed] if resumed.claimed else new_ids
        entry, translations = (
            await d.entry.resolve(view, start, rest, abandoned) if rest else ({}, [])
        )
        entry.update(resumed.entry)
        plan = plan_end(
            start,
            snapshots,
            entry,
            budget=request.max_records or None,
            cap=cap if len(cap) else None,
            fail_on_data_loss=request.fail_on_data_loss,
        )
        plan.data_loss.update(resumed.data_loss)
        _account(d, view, plan, snapshots)
        await _remember_removed(d, view, query_id, start, plan.retired, now_ms)
        _note_resumed(d, view, query_id, resumed, plan.entered)
        for t in translations:
            d.history.record(
                view.name,
                "translated",
                cluster=SplitId.parse(t.split).cluster,
                detail=f"query {query_id}: {t.split} starts at {t.offset} ({t.how})",
                generation=view.generation,
            )
        _note_retired(d, view, query_id, plan.retired)
        for s, what in plan.data_loss.items():
            cid = SplitId.parse(s).cluster
            d.metrics.data_loss.labels(view.name, cid).inc()
            d.history.record(
                view.name,
                "data-loss",
                cluster=cid,
                detail=f"query {query_id}: {what}",
                generation=view.generation,
            )
        return planner_pb2.LatestOffsetsResponse(
            end=ov.to_columns(plan.end),
            available=ov.to_columns(plan.available),
            generation=view.generation,
        )

    # -- PlanPartitions ------------------------------------------------------

    @unary
    async def PlanPartitions(
        self, request: planner_pb2.PlanPartitionsRequest, context: Ctx
    ) -> planner_pb2.PlanPartitionsResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = ov.from_columns(request.start, "start")
        end = ov.from_columns(request.end, "end")
        for field in ("min_partitions", "max_records_per_partition"):
            if getattr(request, field) < 0:
                raise ValidationError(field, "must not be negative (0 means the default)")
        # A split entering the vector has nothing to read yet: it starts at its end.
        frm = start.values_at(end.splits, end.offsets)
        todo = end.offsets > frm
        for cid in end.splits.clusters():
            spec = view.spec.clusters.get(cid)
            if spec is not None and spec.state.readable:
                continue
            why = "cluster removed" if spec is None else f"cluster {spec.state.value}"
            where = end.splits.cluster_slice(cid)
            lost = np.flatnonzero(todo[where]) + where.start
            for s, a, b in zip(
                end.splits.select(lost).ids(),
                frm[lost].tolist(),
                end.offsets[lost].tolist(),
                strict=True,
            ):
                await d.abandonments.record(view.name, query_id, s, a, b, why, view.generation)
            todo[where] = False
        read = end.splits.select(todo)
        pieces = cut_ranges(
            frm[todo],
            end.offsets[todo],
            min_partitions=request.min_partitions,
            max_records=request.max_records_per_partition or DEFAULT_MAX_RECORDS,
            parallelism=request.parallelism,
        )
        clusters = [self._connection(view, cid) for cid in read.clusters()]
        tasks = ranges.columns(
            read.groups,
            read.group[pieces.which],
            read.partitions[pieces.which],
            pieces.start,
            pieces.until,
            pieces.task_sizes(),
        )
        return planner_pb2.PlanPartitionsResponse(
            tasks=tasks, clusters=clusters, generation=view.generation
        )

    def _connection(self, view: StreamView, cid: str) -> common_pb2.ClusterConnection:
        conn = view.spec.clusters[cid].connection(cid)
        if not self._readers_authenticated and conn.properties.has_secrets():
            raise PreconditionError(
                f"cluster {cid!r} of stream {view.name!r} has secret properties, which "
                "this coordinator hands only to authenticated readers: give it "
                "--reader-token-file (and the Spark job coordinatorTokenFile) or "
                "--tls-client-ca"
            )
        return common_pb2.ClusterConnection(
            cluster=cid,
            bootstrap_servers=conn.bootstrap_servers,
            properties=conn.properties.as_librdkafka_dict(),
            fingerprint=conn.fingerprint,
        )

    # -- Commit --------------------------------------------------------------

    @unary
    async def Commit(
        self, request: planner_pb2.CommitRequest, context: Ctx
    ) -> planner_pb2.CommitResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        group_id = validate_id(request.group_id, "group_id")
        end = ov.from_columns(request.end, "end")
        await d.queries.commit(query_id, view.name, end, retention_ms=view.spec.retention_ms)
        if group_id:
            await _commit_groups(d, view, group_id, end)
        return planner_pb2.CommitResponse()


async def _commit_groups(
    d: LeaderDuties, view: StreamView, group_id: str, end: SplitOffsets
) -> None:
    for cid in end.splits.clusters():
        where = end.splits.cluster_slice(cid)
        mine = end.select(np.arange(where.start, where.stop))
        offs = dict(zip(mine.splits.topic_partitions(), mine.offsets.tolist(), strict=True))
        cc = d.discovery.client(view.name, cid)
        if cc is None or not cc.health.reachable:
            continue
        try:
            await d.discovery.call(
                cc, functools.partial(cc.client.commit_group, group_id, offs, 5.0)
            )
        except UnavailableError as exc:
            logger.warning(
                "group commit failed",
                extra={"stream": view.name, "cluster": cid, "error": str(exc)},
            )


async def _lookup(
    cc: ClusterClient, d: LeaderDuties, splits: Splits, query: OffsetQuery
) -> SplitOffsets:
    """Offsets of ``splits`` (all of ``cc``'s cluster) for ``query``; splits
    the cluster does not know are left out. Raises :class:`UnavailableError`."""
    known, pairs = cc.split_table()
    if splits is not known and splits != known:
        pairs = splits.topic_partitions()
    found = await d.discovery.offsets(cc, pairs, query)
    values = np.array(list(map(found.get, pairs, repeat(-1))), dtype=np.int64)
    if len(values) and int(values.min()) < 0:
        there = values >= 0
        return SplitOffsets(splits.select(there), values[there])
    return SplitOffsets(splits, values)


async def _lookup_all(
    d: LeaderDuties, view: StreamView, splits: Splits, query: OffsetQuery
) -> list[SplitOffsets]:
    """:func:`_lookup` for every cluster of ``splits``, concurrently; the
    splits of a cluster that is not set up or does not answer are left out."""

    async def one(cid: str) -> SplitOffsets:
        where = splits.cluster_slice(cid)
        mine = splits.select(np.arange(where.start, where.stop))
        try:
            return await _lookup(d.discovery.require(view.name, cid), d, mine, query)
        except UnavailableError as exc:
            logger.warning(
                "cluster unreachable; its splits join later",
                extra={"stream": view.name, "cluster": cid, "error": str(exc)},
            )
            return ov.EMPTY

    return list(await asyncio.gather(*(one(cid) for cid in splits.clusters())))


async def _at_times(
    d: LeaderDuties, view: StreamView, times: SplitOffsets, *, latest_if_none: bool
) -> list[SplitOffsets]:
    """The first offset of each split of ``times`` whose record time is at
    or after the split's time. A split with no such record resolves to its
    latest offset with ``latest_if_none``, else fails the call
    (:class:`PreconditionError`, naming it). The splits' clusters must be
    read (ACTIVE or DRAINING) and answer (:class:`UnavailableError`: the
    client retries); a partition the cluster does not have is refused."""
    field = "position.split_timestamps"
    out: list[SplitOffsets] = []
    for cid in times.splits.clusters():
        where = times.splits.cluster_slice(cid)
        mine = times.select(np.arange(where.start, where.stop))
        state = view.spec.clusters[cid].state
        if not state.readable:
            raise ValidationError(
                f"{field}.{mine.splits.ids()[0]}",
                f"cluster {cid!r} of stream {view.name!r} is {state.value}: it is not read",
            )
        cc = d.discovery.require(view.name, cid)
        if not cc.discovered:
            await d.discovery.discover(cc)
        _, known = cc.split_table()[0].positions(mine.splits)
        if not known.all():
            s = mine.splits.select(~known).split_ids()[0]
            raise ValidationError(
                f"{field}.{s}",
                f"topic {s.topic!r} of cluster {cid!r} has {cc.partitions.get(s.topic, 0)} "
                f"partition(s): there is no partition {s.partition}",
            )
        by_time = [(ts, mine.select(mine.offsets == ts)) for ts in np.unique(mine.offsets).tolist()]
        found = await asyncio.gather(
            *(_lookup(cc, d, group.splits, OffsetQuery.at_time(ts)) for ts, group in by_time)
        )
        got = SplitOffsets.union(list(found))
        if len(got) < len(mine):
            raise UnavailableError(
                f"stream {view.name!r}: cluster {cid!r} did not answer for every split"
            )
        if not latest_if_none:
            # A time after every record resolves to the end offset: found
            # first, the end asked after, a split found at or past its end
            # has no record at or after its time.
            ends = await _lookup(cc, d, got.splits, OffsetQuery.latest())
            none = got.offsets >= ends.values_at(got.splits, np.zeros(len(got), dtype=np.int64))
            if none.any():
                ids = got.splits.select(none).ids()
                times_of = mine.values_at(got.splits.select(none), np.zeros(len(ids), np.int64))
                named = ", ".join(
                    f"{s} (time {t})"
                    for s, t in zip(ids[:SHOWN_SPLITS], times_of.tolist(), strict=False)
                )
                raise PreconditionError(
                    f"stream {view.name!r}: no record at or after the given time in "
                    f"{len(ids)} split(s): {named}; give an earlier time, or start such "
                    "splits at their latest offset (strategy latest; Spark: "
                    "startingOffsetsByTimestampStrategy=latest)"
                )
        out.append(got)
    return out


async def snapshots_of(
    d: LeaderDuties, view: StreamView, start: SplitOffsets
) -> dict[str, ClusterSnapshot]:
    """What each cluster of the stream looks like now (high watermarks of
    the splits it has and the ones ``start`` holds)."""

    async def one(cid: str) -> tuple[str, ClusterSnapshot]:
        spec = view.spec.clusters[cid]
        cc = d.discovery.client(view.name, cid)
        raw_drain = view.status.drains.get(cid)
        drain = None if raw_drain is None else ov.as_offsets(raw_drain)
        topics = frozenset(spec.topics)
        if cc is None or not spec.state.readable:
            return cid, ClusterSnapshot(spec.state, topics, reachable=cc is not None, drain=drain)
        if not cc.discovered:
            await d.discovery.discover(cc)
        known, _ = cc.split_table()
        ask = known
        # Splits the query holds that discovery does not list (yet) are asked too.
        where = start.splits.cluster_slice(cid)
        _, listed = known.positions(start.splits, where)
        if not listed.all():
            held = start.splits.select(np.arange(where.start, where.stop)[~listed])
            keep = np.array([t in topics for _, t in held.groups], dtype=bool)[held.group]
            ask = Splits.union([known, held.select(keep)])
        try:
            latest = await _lookup(cc, d, ask, OffsetQuery.latest())
            stop = await stop_offsets(d.discovery, view, cc, ask)
        except UnavailableError:
            d.metrics.reachable.labels(view.name, cid).set(0)
            return cid, ClusterSnapshot(spec.state, topics, False, known, drain=drain)
        d.metrics.reachable.labels(view.name, cid).set(1)
        return cid, ClusterSnapshot(spec.state, topics, True, known, latest, drain, stop)

    return dict(await asyncio.gather(*(one(cid) for cid in view.spec.clusters)))


def _account(
    d: LeaderDuties, view: StreamView, plan: EndPlan, snaps: Mapping[str, ClusterSnapshot]
) -> None:
    for cid, n in plan.planned.items():
        d.metrics.planned.labels(view.name, cid).inc(n)
    for cid, snap in snaps.items():
        if snap.reachable and snap.state.readable:
            d.metrics.lag.labels(view.name, cid).set(plan.lag.get(cid, 0))


async def _remember_removed(
    d: LeaderDuties,
    view: StreamView,
    query_id: str,
    start: SplitOffsets,
    retired: Mapping[str, str],
    now_ms: int,
) -> None:
    """Remember where the query leaves the splits of clusters removed from
    the stream (for as long as the stream's retention says; 0: not at all)."""
    gone = [s for s, why in retired.items() if why == CLUSTER_REMOVED]
    if gone and view.spec.retention_ms > 0:
        await d.queries.remember_removed(query_id, view.name, {s: start[s] for s in gone}, now_ms)


def _note_resumed(
    d: LeaderDuties, view: StreamView, query_id: str, resumed: Resumed, entered: list[str]
) -> None:
    """One history entry per cluster added back whose splits resume where
    the query left them."""
    by_cluster: dict[str, list[str]] = defaultdict(list)
    for s in entered:
        if s in resumed.entry:
            by_cluster[SplitId.parse(s).cluster].append(s)
    for cid, splits in sorted(by_cluster.items()):
        shown_ = ", ".join(f"{s}@{resumed.entry[s]}" for s in splits[:SHOWN_SPLITS])
        more = ", ..." if len(splits) > SHOWN_SPLITS else ""
        d.history.record(
            view.name,
            "resumed",
            cluster=cid,
            detail=(
                f"query {query_id}: {len(splits)} split(s) of a cluster added back resume "
                f"where the query left them: {shown_}{more}"
            ),
            generation=view.generation,
        )


def _note_retired(
    d: LeaderDuties, view: StreamView, query_id: str, retired: dict[str, str]
) -> None:
    """One history entry per cluster and reason (a removed cluster may take
    10,000 splits with it)."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s, why in retired.items():
        groups[(SplitId.parse(s).cluster, why)].append(s)
    for (cid, why), splits in sorted(groups.items()):
        if len(splits) == 1:
            detail = f"query {query_id}: {splits[0]} ({why})"
        else:
            named = ", ".join(splits[:SHOWN_SPLITS]) + (
                ", ..." if len(splits) > SHOWN_SPLITS else ""
            )
            detail = f"query {query_id}: {len(splits)} splits ({why}): {named}"
        d.history.record(
            view.name, "retired", cluster=cid, detail=detail, generation=view.generation
        )
