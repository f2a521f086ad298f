"""The Planner gRPC service: the driver side of the Spark source calls it to
resolve positions, plan micro-batches and report commits.

Each method checks its request, makes one call of the term's
:class:`~multikafka.coordinator.planning.batches.MicroBatches` and answers
with its result; the caller must hold the ``reader`` role on the stream
(asked where the request's stream is parsed). Offset vectors travel as columns (``OffsetColumns``), a
plan's ranges too (``RangeColumns``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from multikafka.coordinator.access import AccessControl, Role, caller
from multikafka.coordinator.api.rpc import unary
from multikafka.coordinator.api.vectors import RecentVectors
from multikafka.coordinator.planning.batches import MicroBatches
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core import _offsets as ov
from multikafka.core import _ranges as ranges
from multikafka.core._kafka_config import ISOLATION_LEVELS
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import Connection
from multikafka.core.validation import validate_id, validate_name
from multikafka.v1 import common_pb2, planner_pb2, planner_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
#: Connection messages kept (one per stream and cluster).
_MAX_CONNECTIONS = 4096


class PlannerService(planner_pb2_grpc.PlannerServicer):
    """Every call needs the leader: ``batches`` answers the current term's
    :class:`MicroBatches`, or on a standby raises :class:`NotLeaderError`
    (naming the leader for the client)."""

    def __init__(
        self,
        batches: Callable[[], MicroBatches],
        store: MetadataStore,
        access: AccessControl | None = None,
    ) -> None:
        self._batches = batches
        self._store = store
        self._access = access
        #: What each query sent and was sent lately, decoded (:mod:`.vectors`).
        self.vectors = RecentVectors()
        #: (stream, cluster) -> (metadata generation, connection message).
        self._connections: dict[tuple[str, str], tuple[int, common_pb2.ClusterConnection]] = {}

    def _stream(self, name: str) -> StreamView:
        """The stream a request names, which the caller must read (checked
        before it is looked up, at every request of a LatestOffsetsStream)."""
        stream = validate_name(name, "stream")
        caller(self._access).require(Role.READER, stream)
        return self._store.get(stream)

    @unary
    async def ResolveOffsets(
        self, request: planner_pb2.ResolveOffsetsRequest, context: Ctx
    ) -> planner_pb2.ResolveOffsetsResponse:
        batches = self._batches()
        view = self._stream(request.stream)
        isolation = _isolation(request.isolation_level)
        offsets = await batches.resolve(view, request.position, isolation=isolation)
        return planner_pb2.ResolveOffsetsResponse(
            offsets=ov.to_columns(offsets), generation=view.generation
        )

    @unary
    async def LatestOffsets(
        self, request: planner_pb2.LatestOffsetsRequest, context: Ctx
    ) -> planner_pb2.LatestOffsetsResponse:
        batches = self._batches()
        view = self._stream(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = self.vectors.decode(query_id, request.start, "start")
        if request.max_records < 0:
            raise ValidationError("max_records", "must not be negative (0 means no limit)")
        cap = ov.from_columns(request.cap, "cap")
        isolation = _isolation(request.isolation_level)
        committed = self.vectors.decode(query_id, request.committed, "committed")
        tasks = request.tasks if request.HasField("tasks") else None
        if tasks is not None:
            _check_task_options(tasks)
        if len(committed):
            group_id = validate_id(request.group_id, "group_id")
            await batches.commit(view, query_id, committed, group_id=group_id)
        plan = await batches.latest(
            view,
            query_id,
            start,
            max_records=request.max_records or None,
            cap=cap if len(cap) else None,
            fail_on_data_loss=request.fail_on_data_loss,
            isolation=isolation,
        )
        response = planner_pb2.LatestOffsetsResponse(
            end=self.vectors.encode(query_id, plan.end),
            available=ov.to_columns(plan.available),
            generation=view.generation,
        )
        if tasks is not None:
            response.plan.CopyFrom(
                await self._plan(batches, view, query_id, start, plan.end, tasks)
            )
        return response

    async def LatestOffsetsStream(
        self, request_iterator: AsyncIterator[planner_pb2.LatestOffsetsRequest], context: Ctx
    ) -> AsyncIterator[planner_pb2.LatestOffsetsResponse]:
        """LatestOffsets over a stream a query keeps open: a call's own cost
        (its set-up, metadata and status) once per stream. Each request is
        answered as LatestOffsets answers it; its first refusal ends the
        stream with that status."""
        async for request in request_iterator:
            yield await self.LatestOffsets(request, context)

    @unary
    async def PlanPartitions(
        self, request: planner_pb2.PlanPartitionsRequest, context: Ctx
    ) -> planner_pb2.PlanPartitionsResponse:
        batches = self._batches()
        view = self._stream(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        start = ov.from_columns(request.start, "start")
        end = ov.from_columns(request.end, "end")
        options = planner_pb2.TaskOptions(
            min_partitions=request.min_partitions,
            max_records_per_partition=request.max_records_per_partition,
            parallelism=request.parallelism,
        )
        _check_task_options(options)
        return await self._plan(batches, view, query_id, start, end, options)

    async def _plan(
        self,
        batches: MicroBatches,
        view: StreamView,
        query_id: str,
        start: ov.SplitOffsets,
        end: ov.SplitOffsets,
        options: planner_pb2.TaskOptions,
    ) -> planner_pb2.PlanPartitionsResponse:
        plan = await batches.plan(
            view,
            query_id,
            start,
            end,
            min_partitions=options.min_partitions,
            max_records_per_partition=options.max_records_per_partition or None,
            parallelism=options.parallelism,
        )
        return planner_pb2.PlanPartitionsResponse(
            tasks=ranges.columns(
                plan.groups, plan.group, plan.partitions, plan.start, plan.until, plan.task_ranges
            ),
            clusters=[self._connection(view, c) for c in plan.connections],
            generation=view.generation,
        )

    def _connection(self, view: StreamView, c: Connection) -> common_pb2.ClusterConnection:
        """``c`` on the wire, made once per metadata generation of the stream
        (connection settings are part of it)."""
        key = (view.name, c.cluster)
        known = self._connections.get(key)
        if known is not None and known[0] == view.generation:
            return known[1]
        msg = common_pb2.ClusterConnection(
            cluster=c.cluster,
            bootstrap_servers=c.bootstrap_servers,
            properties=c.properties.as_librdkafka_dict(),
            fingerprint=c.fingerprint,
        )
        if len(self._connections) >= _MAX_CONNECTIONS:  # streams removed: start over
            self._connections.clear()
        self._connections[key] = (view.generation, msg)
        return msg

    @unary
    async def Commit(
        self, request: planner_pb2.CommitRequest, context: Ctx
    ) -> planner_pb2.CommitResponse:
        batches = self._batches()
        view = self._stream(request.stream)
        query_id = validate_id(request.query_id, "query_id", required=True)
        group_id = validate_id(request.group_id, "group_id")
        end = ov.from_columns(request.end, "end")
        await batches.commit(view, query_id, end, group_id=group_id)
        return planner_pb2.CommitResponse()


def _isolation(level: str) -> str:
    """A request's ``isolation_level``, checked ("": each cluster's own)."""
    if level and level not in ISOLATION_LEVELS:
        raise ValidationError(
            "isolation_level", f"use {' or '.join(ISOLATION_LEVELS)}, or leave it empty"
        )
    return level


def _check_task_options(options: planner_pb2.TaskOptions) -> None:
    for field in ("min_partitions", "max_records_per_partition"):
        if getattr(options, field) < 0:
            raise ValidationError(field, "must not be negative (0 means the default)")
