"""The Planner gRPC service: the driver side of the Spark source calls it to
resolve positions, plan micro-batches and report commits."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc

from coordinator.assignment import Range, plan_tasks
from coordinator.leader import LeaderDuties
from coordinator.planner import ClusterSnapshot, new_splits, plan_end
from coordinator.rpc import unary
from coordinator.stream_state import StreamView
from multikafka_core import offsets as ov
from multikafka_core.exceptions import (
    PreconditionError,
    UnavailableError,
    ValidationError,
    shown,
)
from multikafka_core.model import SplitId
from multikafka_core.providers import OffsetQuery
from multikafka_core.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from multikafka_core.validation import validate_id, validate_name

if TYPE_CHECKING:
    from coordinator.server import Coordinator

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]
Position = planner_pb2.Position


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
        splits = {str(s) for cc in readable for s in cc.splits()}
        specific: dict[str, int] = {}
        if kind == Position.SPECIFIC:
            specific = self._check_specific(view, dict(pos.offsets))
            kind = pos.fallback or Position.EARLIEST
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
        for cid in {SplitId.parse(s).cluster for s in specific}:
            d.discovery.require(view.name, cid)  # UNAVAILABLE (the client retries) until set up
        out: dict[str, int] = {}
        lookups: dict[OffsetQuery, list[SplitId]] = defaultdict(list)
        for split in sorted(splits | set(specific)):
            given = specific.get(split)
            if given is None:
                lookups[fallback].append(SplitId.parse(split))
            elif given < 0:  # -2 earliest, -1 latest (Spark's convention)
                lookups[earliest if given == -2 else latest].append(SplitId.parse(split))
            else:
                out[split] = given
        # Splits of a cluster that does not answer are left out: they join the
        # query later, at their cluster's starting position.
        for found in await asyncio.gather(
            *(d.discovery.split_offsets(view.name, ids, q) for q, ids in lookups.items())
        ):
            out.update(found)
        return planner_pb2.ResolveOffsetsResponse(
            offsets=ov.canonical(out), generation=view.generation
        )

    def _check_specific(self, view: StreamView, offsets: dict[str, int]) -> dict[str, int]:
        checked = ov.parse(offsets, "position.offsets", allow_special=True)
        for s in checked:
            split = SplitId.parse(s)
            spec = view.spec.clusters.get(split.cluster)
            if spec is None:
                raise ValidationError(
                    f"position.offsets.{s}",
                    f"stream {view.name!r} has no cluster {shown(split.cluster)}",
                )
            if split.topic not in spec.topics:
                raise ValidationError(
                    f"position.offsets.{s}",
                    f"cluster {split.cluster!r} of stream {view.name!r} has no topic {shown(split.topic)}",
                )
        return checked

    # -- LatestOffsets -------------------------------------------------------

    @unary
    async def LatestOffsets(
        self, request: planner_pb2.LatestOffsetsRequest, context: Ctx
    ) -> planner_pb2.LatestOffsetsResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = ov.splits_of(ov.parse(dict(request.start), "start"))
        if request.max_records < 0:
            raise ValidationError("max_records", "must not be negative (0 means no limit)")
        cap = ov.parse(dict(request.cap), "cap")
        snapshots = await snapshots_of(d, view, start)
        new = new_splits(start, snapshots)
        abandoned = {}
        progress = d.queries.get(query_id)
        if progress is not None:
            abandoned = progress.abandoned
        entry, translations = (
            await d.entry.resolve(view, start, new, abandoned) if new else ({}, [])
        )
        plan = plan_end(
            start,
            snapshots,
            entry,
            budget=request.max_records or None,
            cap=cap or None,
            fail_on_data_loss=request.fail_on_data_loss,
        )
        _account(d, view, start, plan.end, snapshots)
        for t in translations:
            d.history.record(
                view.name,
                "translated",
                cluster=SplitId.parse(t.split).cluster,
                detail=f"query {query_id}: {t.split} starts at {t.offset} ({t.how})",
                generation=view.generation,
            )
        for s, why in plan.retired.items():
            d.history.record(
                view.name,
                "retired",
                cluster=SplitId.parse(s).cluster,
                detail=f"query {query_id}: {s} ({why})",
                generation=view.generation,
            )
        for s, what in plan.data_loss.items():
            d.metrics.data_loss.labels(view.name, SplitId.parse(s).cluster).inc()
            d.history.record(
                view.name,
                "data-loss",
                cluster=SplitId.parse(s).cluster,
                detail=f"query {query_id}: {what}",
                generation=view.generation,
            )
        return planner_pb2.LatestOffsetsResponse(end=plan.end, generation=view.generation)

    # -- PlanPartitions ------------------------------------------------------

    @unary
    async def PlanPartitions(
        self, request: planner_pb2.PlanPartitionsRequest, context: Ctx
    ) -> planner_pb2.PlanPartitionsResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = ov.splits_of(ov.parse(dict(request.start), "start"))
        end = ov.splits_of(ov.parse(dict(request.end), "end"))
        for field in ("min_partitions", "max_records_per_partition"):
            if getattr(request, field) < 0:
                raise ValidationError(field, "must not be negative (0 means the default)")
        ranges: list[Range] = []
        for s, until in end.items():
            frm = start.get(s, until)  # a split entering the vector has nothing to read yet
            if until <= frm:
                continue
            cid = SplitId.parse(s).cluster
            spec = view.spec.clusters.get(cid)
            if spec is None or not spec.state.readable:
                why = "cluster removed" if spec is None else f"cluster {spec.state.value}"
                await d.abandonments.record(
                    view.name, query_id, s, frm, until, why, view.generation
                )
                continue
            ranges.append(Range(s, frm, until))
        tasks = plan_tasks(
            ranges,
            min_partitions=max(request.min_partitions, 1),
            max_records=request.max_records_per_partition or 100_000,
        )
        used = sorted({SplitId.parse(r.split).cluster for task in tasks for r in task})
        clusters = []
        for cid in used:
            conn = view.spec.clusters[cid].connection(cid)
            if not self._readers_authenticated and conn.properties.has_secrets():
                raise PreconditionError(
                    f"cluster {cid!r} of stream {view.name!r} has secret properties, which "
                    "this coordinator hands only to authenticated readers: give it "
                    "--reader-token-file (and the Spark job coordinatorTokenFile) or "
                    "--tls-client-ca"
                )
            clusters.append(
                common_pb2.ClusterConnection(
                    cluster=cid,
                    bootstrap_servers=conn.bootstrap_servers,
                    properties=conn.properties.as_librdkafka_dict(),
                    fingerprint=conn.fingerprint,
                )
            )
        return planner_pb2.PlanPartitionsResponse(
            tasks=[planner_pb2.TaskPlan(ranges=[_range_pb(r) for r in task]) for task in tasks],
            clusters=clusters,
            generation=view.generation,
        )

    # -- Commit --------------------------------------------------------------

    @unary
    async def Commit(
        self, request: planner_pb2.CommitRequest, context: Ctx
    ) -> planner_pb2.CommitResponse:
        d, view = self._view(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        group_id = validate_id(request.group_id, "group_id")
        end = ov.splits_of(ov.parse(dict(request.end), "end"))
        await d.queries.commit(query_id, view.name, end)
        if group_id:
            await _commit_groups(d, view, group_id, end)
        return planner_pb2.CommitResponse()


async def _commit_groups(
    d: LeaderDuties, view: StreamView, group_id: str, end: Mapping[str, int]
) -> None:
    by_cluster: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
    for s, off in end.items():
        split = SplitId.parse(s)
        by_cluster[split.cluster][(split.topic, split.partition)] = off
    for cid, offs in by_cluster.items():
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


async def snapshots_of(
    d: LeaderDuties, view: StreamView, start: Mapping[str, int]
) -> dict[str, ClusterSnapshot]:
    """What each cluster of the stream looks like now (high watermarks of
    the splits it has and the ones ``start`` holds)."""
    started = {s: SplitId.parse(s) for s in start}

    async def one(cid: str) -> tuple[str, ClusterSnapshot]:
        spec = view.spec.clusters[cid]
        cc = d.discovery.client(view.name, cid)
        drain = view.status.drains.get(cid)
        topics = frozenset(spec.topics)
        if cc is None or not spec.state.readable:
            return cid, ClusterSnapshot(spec.state, topics, reachable=cc is not None, drain=drain)
        if not cc.discovered:
            await d.discovery.discover(cc)
        known = {str(s): s for s in cc.splits()}
        splits = frozenset(known)
        ask = known | {
            s: sid for s, sid in started.items() if sid.cluster == cid and sid.topic in topics
        }
        parts = [(sid.topic, sid.partition) for _, sid in sorted(ask.items())]
        try:
            found = await d.discovery.offsets(cc, parts, OffsetQuery.latest())
        except UnavailableError:
            d.metrics.reachable.labels(view.name, cid).set(0)
            return cid, ClusterSnapshot(spec.state, topics, False, splits, drain=drain)
        d.metrics.reachable.labels(view.name, cid).set(1)
        latest = {f"{cid}/{t}/{p}": off for (t, p), off in found.items()}
        return cid, ClusterSnapshot(spec.state, topics, True, splits, latest, drain)

    return dict(await asyncio.gather(*(one(cid) for cid in view.spec.clusters)))


def _account(
    d: LeaderDuties,
    view: StreamView,
    start: Mapping[str, int],
    end: Mapping[str, int],
    snaps: Mapping[str, ClusterSnapshot],
) -> None:
    planned: dict[str, int] = defaultdict(int)
    lag: dict[str, int] = defaultdict(int)
    for s, e in end.items():
        if s == ov.NO_SPLITS or s not in start:
            continue
        cid = SplitId.parse(s).cluster
        planned[cid] += max(e - start[s], 0)
        high = snaps[cid].latest.get(s) if cid in snaps else None
        if high is not None:
            lag[cid] += max(high - start[s], 0)
    for cid, n in planned.items():
        d.metrics.planned.labels(view.name, cid).inc(n)
    for cid, snap in snaps.items():
        if snap.reachable and snap.state.readable:
            d.metrics.lag.labels(view.name, cid).set(lag.get(cid, 0))


def _range_pb(r: Range) -> common_pb2.SplitRange:
    split = SplitId.parse(r.split)
    return common_pb2.SplitRange(
        cluster=split.cluster,
        topic=split.topic,
        partition=split.partition,
        from_offset=r.start,
        until_offset=r.until,
    )
