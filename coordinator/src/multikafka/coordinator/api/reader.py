"""The Reader gRPC service: agents register, subscribe to reconcile events,
heartbeat (acknowledging the generation they applied) and report reads.
Each method checks its request and makes one call of the term's
:class:`~multikafka.coordinator.agents.link.AgentLink`.

An agent acts for the principal that registered it: its reconcile events
show only the streams that principal may read (a policy change that alters
them ends its subscription, and it subscribes again under the new one), its
reports and pushed counters are taken for those streams only, and its id is
not another principal's to take over.

Every call needs the leader (a standby raises :class:`NotLeaderError`, which
names the leader: agents move there by themselves).

Subscriptions send reconcile events as the bytes the reconciler serialized
once for every agent (:func:`add_reader_service` registers the service so
that gRPC sends them as they are).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import grpc

from multikafka.coordinator.access import AccessControl, Role, caller
from multikafka.coordinator.agents.link import AgentLink
from multikafka.coordinator.agents.task_slots import MAX_TASK_SLOTS
from multikafka.coordinator.api.rpc import safe_deserializer, streaming, unary
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.translation import ReadMark
from multikafka.core import _fingerprint as fingerprint
from multikafka.core import _ranges as ranges
from multikafka.core._ranges import SplitRange
from multikafka.core.exceptions import NotLeaderError, ValidationError, shown
from multikafka.core.model import SplitId
from multikafka.core.validation import validate_id, validate_name
from multikafka.v1 import reader_pb2, reader_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


class ReaderService(reader_pb2_grpc.ReaderServicer):
    """``link`` answers the current term's :class:`AgentLink`, or on a
    standby raises :class:`NotLeaderError`."""

    def __init__(
        self,
        link: Callable[[], AgentLink],
        store: MetadataStore,
        heartbeat_interval_s: float,
        access: AccessControl | None = None,
    ) -> None:
        self._link = link
        self._store = store
        self._heartbeat_ms = int(heartbeat_interval_s * 1000)
        self._access = access
        if access is not None:
            access.on_change(self._policy_changed)

    def _policy_changed(self) -> None:
        try:
            link = self._link()
        except NotLeaderError:
            return  # a standby has no subscriptions
        link.policy_changed()

    @unary
    async def Register(
        self, request: reader_pb2.RegisterRequest, context: Ctx
    ) -> reader_pb2.RegisterResponse:
        link = self._link()
        agent_id = validate_id(request.agent_id, "agent_id", required=True)
        host = validate_id(request.host, "host")
        converter = validate_id(request.converter, "converter")
        who = caller(self._access)
        generation = await link.register(agent_id, host, request.pid, converter, who)
        return reader_pb2.RegisterResponse(
            generation=generation, heartbeat_interval_ms=self._heartbeat_ms
        )

    @streaming
    async def Subscribe(
        self, request: reader_pb2.SubscribeRequest, context: Ctx
    ) -> AsyncIterator[reader_pb2.ReconcileEvent]:
        link = self._link()
        agent_id = validate_id(request.agent_id, "agent_id")
        # Closed as soon as the call ends: the agent's subscription with it.
        who = caller(self._access)
        async with aclosing(link.events(agent_id, who)) as events:
            async for payload in events:
                yield payload  # type: ignore[misc]  # bytes: see method_handlers

    @unary
    async def Heartbeat(
        self, request: reader_pb2.HeartbeatRequest, context: Ctx
    ) -> reader_pb2.HeartbeatResponse:
        who = caller(self._access)
        stats = [s for s in request.sub_readers if who.may(Role.READER, s.stream)]
        link = self._link()
        link.check_owner(request.agent_id, who)
        beat = link.heartbeat(request.agent_id, request.applied_generation, stats)
        return reader_pb2.HeartbeatResponse(known=beat.known, generation=beat.generation)

    @unary
    async def Acknowledge(
        self, requests: AsyncIterator[reader_pb2.AckRequest], context: Ctx
    ) -> reader_pb2.AckResponse:
        """One agent's acknowledgements, one message per applied event, for
        as long as the agent keeps the call open."""
        self._link()
        agent_id = ""
        who = caller(self._access)
        async for ack in requests:
            link = self._link()  # a deposed replica ends the call: the agent moves
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
            link.check_owner(agent_id, who)
            link.acknowledge(agent_id, ack.applied_generation)
        return reader_pb2.AckResponse()

    @unary
    async def ReportReads(
        self, request: reader_pb2.ReportReadsRequest, context: Ctx
    ) -> reader_pb2.ReportReadsResponse:
        link = self._link()
        # Everything is checked before anything is applied: a refused report
        # leaves no marks or abandoned ranges behind.
        agent_id = validate_id(request.agent_id, "agent_id", required=True)
        stream = validate_name(request.stream, "stream")
        caller(self._access).require(Role.READER, stream)
        stream = self._store.get(stream).name
        marks = [_mark(m, f"marks[{i}]") for i, m in enumerate(request.marks)]
        passed = [_span(p, f"passed[{i}]") for i, p in enumerate(request.passed)]
        abandoned = ranges.from_columns(request.abandoned, "abandoned")
        query_id = validate_id(request.query_id, "query_id", required=bool(abandoned))
        if request.task_slots > MAX_TASK_SLOTS:
            raise ValidationError("task_slots", f"must be at most {MAX_TASK_SLOTS:,}")
        await link.report_reads(
            stream, agent_id, query_id, marks, abandoned, request.task_slots, passed
        )
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


#: Fingerprints a mark may carry (agents send TRAILING).
MAX_FINGERPRINTS = 16


def _mark(m: reader_pb2.ReadMark, field: str) -> ReadMark:
    """A reported mark, checked. Without ``next_offset`` (an older agent, or
    a read that stopped early) only its offset and time count."""
    _split(m.split, f"{field}.split")
    if m.last_offset < 0:
        raise ValidationError(f"{field}.last_offset", "must be an offset >= 0")
    if not m.next_offset:
        return ReadMark(m.split, m.last_offset, m.last_timestamp_ms)
    if m.next_offset <= m.last_offset:
        raise ValidationError(
            f"{field}.next_offset",
            f"must be past last_offset ({m.last_offset}): the first offset not read",
        )
    if not 0 <= m.from_offset <= m.last_offset:
        raise ValidationError(
            f"{field}.from_offset", f"must be an offset >= 0 and <= last_offset ({m.last_offset})"
        )
    if len(m.fingerprint_digests) > MAX_FINGERPRINTS:
        raise ValidationError(
            f"{field}.fingerprint_digests", f"at most {MAX_FINGERPRINTS} fingerprints"
        )
    try:
        fps = fingerprint.pairs(m.fingerprint_times, m.fingerprint_digests)
    except ValueError as exc:
        raise ValidationError(f"{field}.fingerprint_times", str(exc)) from None
    return ReadMark(m.split, m.last_offset, m.last_timestamp_ms, m.next_offset, m.from_offset, fps)


def _span(p: reader_pb2.ReadSpan, field: str) -> SplitRange:
    split = _split(p.split, f"{field}.split")
    if not 0 <= p.from_offset < p.next_offset:
        raise ValidationError(field, "must read from an offset >= 0 to a later one")
    return SplitRange(split.cluster, split.topic, split.partition, p.from_offset, p.next_offset)


def _split(text: str, field: str) -> SplitId:
    try:
        return SplitId.parse(text)
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
