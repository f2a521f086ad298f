"""The Reader gRPC service: agents register, subscribe to reconcile events,
heartbeat (acknowledging the generation they applied) and report reads."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from coordinator.agent_registry import AgentRegistry
from coordinator.metrics import Metrics
from coordinator.reconcile import Reconciler
from coordinator.rpc import streaming, unary
from coordinator.translation import Abandonments, ReadMarks
from multikafka_core.exceptions import NotFoundError, ValidationError
from multikafka_core.model import SplitId
from multikafka_core.v1 import reader_pb2, reader_pb2_grpc

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]


class ReaderService(reader_pb2_grpc.ReaderServicer):
    def __init__(
        self,
        registry: AgentRegistry,
        reconciler: Reconciler,
        marks: ReadMarks,
        abandonments: Abandonments,
        metrics: Metrics,
        heartbeat_interval_s: float,
    ) -> None:
        self._registry = registry
        self._reconciler = reconciler
        self._marks = marks
        self._abandonments = abandonments
        self._metrics = metrics
        self._heartbeat_ms = int(heartbeat_interval_s * 1000)
        #: (agent, stream/cluster) -> last pushed cumulative counters
        self._last_stats: dict[tuple[str, str], tuple[int, int]] = {}

    @unary
    async def Register(
        self, request: reader_pb2.RegisterRequest, context: Ctx
    ) -> reader_pb2.RegisterResponse:
        if not request.agent_id:
            raise ValidationError("agent_id", "required")
        await self._registry.register(request.agent_id, request.host, request.pid)
        self._metrics.readers.set(len(self._registry.agents()))
        return reader_pb2.RegisterResponse(
            generation=self._reconciler.generation, heartbeat_interval_ms=self._heartbeat_ms
        )

    @streaming
    async def Subscribe(
        self, request: reader_pb2.SubscribeRequest, context: Ctx
    ) -> AsyncIterator[reader_pb2.ReconcileEvent]:
        if self._registry.get(request.agent_id) is None:
            raise NotFoundError(
                f"agent {request.agent_id!r} is not registered; call Register first"
            )
        queue = self._registry.subscribe(request.agent_id)
        try:
            yield self._reconciler.snapshot()
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event
        finally:
            self._registry.unsubscribe(request.agent_id, queue)

    @unary
    async def Heartbeat(
        self, request: reader_pb2.HeartbeatRequest, context: Ctx
    ) -> reader_pb2.HeartbeatResponse:
        agent = self._registry.heartbeat(
            request.agent_id, request.applied_generation, list(request.sub_readers)
        )
        if agent is None:
            return reader_pb2.HeartbeatResponse(known=False, generation=self._reconciler.generation)
        for s in request.sub_readers:
            key = (request.agent_id, f"{s.stream}/{s.cluster}")
            records, restarts = self._last_stats.get(key, (0, 0))
            if s.records_read > records:
                self._metrics.agent_records.labels(s.stream, s.cluster).inc(
                    s.records_read - records
                )
            if s.restarts > restarts:
                self._metrics.subreader_restarts.labels(s.stream, s.cluster).inc(
                    s.restarts - restarts
                )
            self._last_stats[key] = (max(records, s.records_read), max(restarts, s.restarts))
        return reader_pb2.HeartbeatResponse(known=True, generation=self._reconciler.generation)

    @unary
    async def ReportReads(
        self, request: reader_pb2.ReportReadsRequest, context: Ctx
    ) -> reader_pb2.ReportReadsResponse:
        for mark in request.marks:
            SplitId.parse(mark.split)
            self._marks.add(request.stream, mark.split, mark.last_offset, mark.last_timestamp_ms)
        for r in request.abandoned:
            SplitId.parse(r.split)
            await self._abandonments.record(
                request.stream,
                request.query_id,
                r.split,
                r.from_offset,
                r.until_offset,
                f"cluster went away while agent {request.agent_id} read it",
            )
        if request.marks:
            self._registry.hold(request.agent_id, request.stream, {m.split for m in request.marks})
        return reader_pb2.ReportReadsResponse()
