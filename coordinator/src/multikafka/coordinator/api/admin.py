"""The Admin gRPC service: stream documents, cluster operations, and what the
coordinator knows about readers, assignments, queries and itself. Secrets in
stream properties are never returned (they are redacted), and a document put
back with redacted values keeps the stored ones.

Every replica answers the read-only calls (documents and states from its
warm copy of the metadata; history, queries and readers read from etcd on a
standby); the others need the leader: a standby raises
:class:`NotLeaderError`, which names the leader for the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from multikafka.coordinator.api.rpc import unary
from multikafka.coordinator.operations.reports import Reports, StreamReport
from multikafka.coordinator.operations.status import ServingReplica
from multikafka.coordinator.operations.streams import StreamOperations
from multikafka.core.exceptions import ValidationError, shown
from multikafka.core.model import DEFAULT_MARGIN_MS, STRATEGY_NAMES, FailoverStrategy
from multikafka.core.validation import MAX_DOCUMENT_BYTES, parse_stream_json, validate_name
from multikafka.v1 import admin_pb2, admin_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


class AdminService(admin_pb2_grpc.AdminServicer):
    """``operations`` answers the current term's :class:`StreamOperations`,
    or on a standby raises :class:`NotLeaderError`; ``reports`` answers the
    leader's reports or a standby's (from etcd); ``replica`` tells its
    status."""

    def __init__(
        self,
        operations: Callable[[], StreamOperations],
        reports: Callable[[], Reports],
        replica: ServingReplica,
    ) -> None:
        self._operations = operations
        self._reports = reports
        self._replica = replica

    @unary
    async def PutStream(
        self, request: admin_pb2.PutStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        size = len(request.document_json.encode())
        if size >= MAX_DOCUMENT_BYTES:
            raise ValidationError(
                "document_json",
                f"is {size:,} bytes; a stream document must be under 1 MiB ({MAX_DOCUMENT_BYTES:,} bytes)",
            )
        if request.expected_version < 0:
            raise ValidationError(
                "expected_version",
                "must be a version GetStream returned, or 0 to replace any version",
            )
        operations = self._operations()
        spec = parse_stream_json(request.document_json)
        return _stream_info(await operations.put_stream(spec, request.expected_version))

    @unary
    async def GetStream(
        self, request: admin_pb2.GetStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return _stream_info(self._reports().stream(validate_name(request.name, "name")))

    @unary
    async def ListStreams(
        self, request: admin_pb2.ListStreamsRequest, context: Ctx
    ) -> admin_pb2.ListStreamsResponse:
        return admin_pb2.ListStreamsResponse(
            streams=[_stream_info(r) for r in self._reports().streams()]
        )

    @unary
    async def DeleteStream(
        self, request: admin_pb2.DeleteStreamRequest, context: Ctx
    ) -> admin_pb2.DeleteStreamResponse:
        name = validate_name(request.name, "name")
        deleted = await self._operations().delete_stream(name)
        return admin_pb2.DeleteStreamResponse(deleted=deleted)

    @unary
    async def StreamHistory(
        self, request: admin_pb2.StreamHistoryRequest, context: Ctx
    ) -> admin_pb2.StreamHistoryResponse:
        name = validate_name(request.name, "name")
        if request.limit < 0:
            raise ValidationError("limit", "must not be negative (0 means all that are kept)")
        entries = await self._reports().history(name, request.limit)
        return admin_pb2.StreamHistoryResponse(
            entries=[
                admin_pb2.HistoryEntry(
                    time_ms=e.time_ms,
                    generation=e.generation,
                    kind=e.kind,
                    cluster=e.cluster,
                    detail=e.detail,
                )
                for e in entries
            ]
        )

    @unary
    async def DrainCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        return _stream_info(await operations.drain(*_stream_cluster(request)))

    @unary
    async def FailCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        return _stream_info(await operations.fail(*_stream_cluster(request)))

    @unary
    async def ActivateCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        return _stream_info(await operations.activate(*_stream_cluster(request)))

    @unary
    async def Failover(
        self, request: admin_pb2.FailoverRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        stream = validate_name(request.stream, "stream")
        src = validate_name(request.from_cluster, "from_cluster")
        dst = validate_name(request.to_cluster, "to_cluster")
        try:
            strategy = FailoverStrategy(request.strategy or "timestamp")
        except ValueError:
            raise ValidationError(
                "strategy", f"unknown strategy {shown(request.strategy)}; use {STRATEGY_NAMES}"
            ) from None
        margin_ms = request.margin_ms if request.HasField("margin_ms") else DEFAULT_MARGIN_MS
        if request.dry_run:
            report, translations = await self._operations().preview_failover(
                stream, src, dst, strategy=strategy, margin_ms=margin_ms
            )
            info = _stream_info(report)
            info.translations.extend(
                admin_pb2.Translation(
                    query_id=query_id,
                    split=t.split,
                    source=t.source,
                    estimate=t.estimate,
                    offset=t.offset,
                    result=t.result,
                    skipped=t.skipped,
                    detail=t.how,
                )
                for query_id, t in translations
            )
            return info
        report = await self._operations().failover(
            stream, src, dst, strategy=strategy, margin_ms=margin_ms, reason=request.reason
        )
        return _stream_info(report)

    @unary
    async def ListReaders(
        self, request: admin_pb2.ListReadersRequest, context: Ctx
    ) -> admin_pb2.ListReadersResponse:
        return admin_pb2.ListReadersResponse(
            readers=[
                admin_pb2.ReaderInfo(
                    agent_id=a.agent_id,
                    host=a.host,
                    pid=a.pid,
                    applied_generation=a.applied_generation,
                    last_heartbeat_ms=a.last_heartbeat_ms,
                    sub_readers=sorted(a.sub_readers),
                    subscribed=a.queue is not None,
                    converter=a.converter,
                )
                for a in await self._reports().readers()
            ]
        )

    @unary
    async def ListAssignments(
        self, request: admin_pb2.ListAssignmentsRequest, context: Ctx
    ) -> admin_pb2.ListAssignmentsResponse:
        name = validate_name(request.stream, "stream")
        return admin_pb2.ListAssignmentsResponse(
            assignments=[
                admin_pb2.Assignment(agent_id=agent_id, splits=held)
                for agent_id, held in self._operations().assignments(name)
            ]
        )

    @unary
    async def ListQueries(
        self, request: admin_pb2.ListQueriesRequest, context: Ctx
    ) -> admin_pb2.ListQueriesResponse:
        return admin_pb2.ListQueriesResponse(
            queries=[
                admin_pb2.QueryInfo(
                    query_id=q.query_id, stream=q.stream, offsets=q.offsets, updated_ms=q.updated_ms
                )
                for q in await self._reports().queries()
            ]
        )

    @unary
    async def Status(
        self, request: admin_pb2.StatusRequest, context: Ctx
    ) -> admin_pb2.StatusResponse:
        s = await self._replica.status()
        return admin_pb2.StatusResponse(
            role=s.role,
            leader=s.leader,
            id=s.id,
            address=s.address,
            etcd=admin_pb2.EtcdStatus(
                endpoints=s.etcd.endpoints,
                connected=s.etcd.connected,
                reachable=s.etcd.reachable,
                version=s.etcd.version,
                error=s.etcd.error,
            ),
            generation=s.generation,
            elections=s.elections,
            replicas=[
                admin_pb2.ReplicaInfo(id=r.id, address=r.address, role=r.role, since_ms=r.since_ms)
                for r in s.replicas
            ],
        )


def _stream_cluster(request: admin_pb2.ClusterRequest) -> tuple[str, str]:
    return validate_name(request.stream, "stream"), validate_name(request.cluster, "cluster")


def _stream_info(report: StreamReport) -> admin_pb2.StreamInfo:
    view = report.view
    clusters = []
    for c in report.clusters:
        status = admin_pb2.ClusterStatus(
            cluster=c.cluster,
            state=c.state.to_proto(),
            reachable=c.reachable,
            error=c.error,
            partitions=c.partitions,
            drain_offsets=c.drain_offsets,
            unreachable_since_ms=c.unreachable_since_ms,
            records_read=c.records_read,
            records_planned=c.records_planned,
        )
        if c.lag_records is not None:
            status.lag_records = c.lag_records
        clusters.append(status)
    return admin_pb2.StreamInfo(
        name=view.name,
        document_json=view.spec.to_json(redact=True),
        version=view.spec_revision,
        generation=view.generation,
        clusters=clusters,
    )
