"""The Reader gRPC service: agents register, subscribe to reconcile events,
heartbeat (acknowledging the generation they applied) and report reads.

Every call needs the leader (a standby raises :class:`NotLeaderError`, which
names the leader: agents move there by themselves).

Subscriptions send reconcile events as the bytes the reconciler serialized
once for every agent (:func:`add_reader_service` registers the service so
that gRPC sends them as they are).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from multikafka.coordinator.api.rpc import safe_deserializer, streaming, unary
from multikafka.coordinator.metrics import MALFORMED_MODES
from multikafka.core import ranges
from multikafka.core.exceptions import NotFoundError, ValidationError, shown
from multikafka.core.model import SplitId
from multikafka.core.validation import validate_id, validate_name
from multikafka.v1 import reader_pb2, reader_pb2_grpc

if TYPE_CHECKING:
    from multikafka.coordinator.runtime.server import Coordinator

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]


class ReaderService(reader_pb2_grpc.ReaderServicer):
    def __init__(self, coordinator: Coordinator, heartbeat_interval_s: float) -> None:
        self._c = coordinator
        self._heartbeat_ms = int(heartbeat_interval_s * 1000)

    @unary
    async def Register(
        self, request: reader_pb2.RegisterRequest, context: Ctx
    ) -> reader_pb2.RegisterResponse:
        d = self._c.leading()
        agent_id = validate_id(request.agent_id, "agent_id", required=True)
        await d.registry.register(agent_id, validate_id(request.host, "host"), request.pid)
        return reader_pb2.RegisterResponse(
            generation=d.reconciler.generation, heartbeat_interval_ms=self._heartbeat_ms
        )

    @streaming
    async def Subscribe(
        self, request: reader_pb2.SubscribeRequest, context: Ctx
    ) -> AsyncIterator[reader_pb2.ReconcileEvent]:
        d = self._c.leading()
        agent_id = validate_id(request.agent_id, "agent_id")
        if d.registry.get(agent_id) is None:
            raise NotFoundError(f"agent {shown(agent_id)} is not registered; call Register first")
        mailbox = d.registry.subscribe(agent_id)
        try:
            yield d.reconciler.snapshot_payload()  # type: ignore[misc]  # bytes: see method_handlers
            while True:
                item = await mailbox.get()
                if item is None:
                    return
                d.reconciler.sent(item)
                yield item.payload  # type: ignore[misc]
        finally:
            d.registry.unsubscribe(agent_id, mailbox)

    @unary
    async def Heartbeat(
        self, request: reader_pb2.HeartbeatRequest, context: Ctx
    ) -> reader_pb2.HeartbeatResponse:
        d = self._c.leading()
        agent = d.registry.heartbeat(
            request.agent_id, request.applied_generation, list(request.sub_readers)
        )
        if agent is None:
            return reader_pb2.HeartbeatResponse(known=False, generation=d.reconciler.generation)
        for s in request.sub_readers:
            view = self._c.store.find(s.stream)
            if view is None or s.cluster not in view.spec.clusters:
                continue  # gone (or never was): no metric series for it
            key = f"{s.stream}/{s.cluster}"
            now = (
                s.records_read,
                s.restarts,
                s.malformed_records,
                s.corrupt_records,
                s.malformed_failures,
            )
            before = agent.counted.get(key, ())
            before = before + (0,) * (len(now) - len(before))
            labels = (
                (d.metrics.agent_records, (s.stream, s.cluster)),
                (d.metrics.subreader_restarts, (s.stream, s.cluster)),
                *((d.metrics.malformed, (s.stream, s.cluster, m)) for m in MALFORMED_MODES),
            )
            for (family, names), value, counted in zip(labels, now, before, strict=True):
                if value > counted:
                    family.labels(*names).inc(value - counted)
            agent.counted[key] = tuple(map(max, now, before))
        return reader_pb2.HeartbeatResponse(known=True, generation=d.reconciler.generation)

    @unary
    async def Acknowledge(
        self, requests: AsyncIterator[reader_pb2.AckRequest], context: Ctx
    ) -> reader_pb2.AckResponse:
        """One agent's acknowledgements, one message per applied event, for
        as long as the agent keeps the call open."""
        self._c.leading()
        agent_id = ""
        async for ack in requests:
            d = self._c.leading()  # a deposed replica ends the call: the agent moves
            if not isinstance(ack, reader_pb2.AckRequest):
                raise ValidationError("request", "an acknowledgement that does not parse")
            if not agent_id:
                agent_id = validate_id(ack.agent_id, "agent_id", required=True)
            elif ack.agent_id != agent_id:
                raise ValidationError(
                    "agent_id",
                    f"a call acknowledges for one agent ({shown(agent_id)}), "
                    f"not also for {shown(ack.agent_id)}",
                )
            d.registry.acknowledge(agent_id, ack.applied_generation)
        return reader_pb2.AckResponse()

    @unary
    async def ReportReads(
        self, request: reader_pb2.ReportReadsRequest, context: Ctx
    ) -> reader_pb2.ReportReadsResponse:
        d = self._c.leading()
        # Everything is checked before anything is applied: a refused report
        # leaves no marks or abandoned ranges behind.
        agent_id = validate_id(request.agent_id, "agent_id", required=True)
        stream = self._c.store.get(validate_name(request.stream, "stream")).name
        for i, mark in enumerate(request.marks):
            _split(mark.split, f"marks[{i}].split")
            if mark.last_offset < 0:
                raise ValidationError(f"marks[{i}].last_offset", "must be an offset >= 0")
        abandoned = ranges.from_columns(request.abandoned, "abandoned")
        query_id = validate_id(request.query_id, "query_id", required=bool(abandoned))
        for mark in request.marks:
            d.marks.add(stream, mark.split, mark.last_offset, mark.last_timestamp_ms)
        for r in abandoned:
            await d.abandonments.record(
                stream,
                query_id,
                r.split,
                r.start,
                r.until,
                f"cluster went away while agent {shown(agent_id)} read it",
            )
        if request.marks:
            d.registry.hold(agent_id, stream, {m.split for m in request.marks})
        return reader_pb2.ReportReadsResponse()


def _as_sent(message: bytes | reader_pb2.ReconcileEvent) -> bytes:
    """Subscribe's serializer: events arrive serialized already."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def method_handlers(service: ReaderService) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The generated handlers of the Reader service, with Subscribe's events
    sent as the bytes they were serialized to once."""
    return {
        "Register": grpc.unary_unary_rpc_method_handler(
            service.Register,
            request_deserializer=reader_pb2.RegisterRequest.FromString,
            response_serializer=reader_pb2.RegisterResponse.SerializeToString,
        ),
        "Subscribe": grpc.unary_stream_rpc_method_handler(
            service.Subscribe,
            request_deserializer=reader_pb2.SubscribeRequest.FromString,
            response_serializer=_as_sent,
        ),
        "Heartbeat": grpc.unary_unary_rpc_method_handler(
            service.Heartbeat,
            request_deserializer=reader_pb2.HeartbeatRequest.FromString,
            response_serializer=reader_pb2.HeartbeatResponse.SerializeToString,
        ),
        "Acknowledge": grpc.stream_unary_rpc_method_handler(
            service.Acknowledge,
            request_deserializer=safe_deserializer(reader_pb2.AckRequest.FromString),
            response_serializer=reader_pb2.AckResponse.SerializeToString,
        ),
        "ReportReads": grpc.unary_unary_rpc_method_handler(
            service.ReportReads,
            request_deserializer=reader_pb2.ReportReadsRequest.FromString,
            response_serializer=reader_pb2.ReportReadsResponse.SerializeToString,
        ),
    }


def add_reader_service(service: ReaderService, server: grpc.aio.Server) -> None:
    """Register the Reader service (as the generated code would, with
    :func:`method_handlers`)."""
    handlers = method_handlers(service)
    name = reader_pb2.DESCRIPTOR.services_by_name["Reader"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)


def _split(text: str, field: str) -> SplitId:
    try:
        return SplitId.parse(text)
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
