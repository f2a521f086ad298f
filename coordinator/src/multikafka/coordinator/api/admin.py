"""The Admin gRPC service: stream documents, cluster operations, and what the
coordinator knows about readers, assignments, queries and itself. Secrets in
stream properties are never returned (they are redacted), and a document put
back with redacted values keeps the stored ones.

Each method asks the caller's rights where it parses the stream (an
``operator`` of it, or an ``admin``), before anything is looked up, and
lists only the streams the caller may operate (:mod:`..access`).

Every replica answers the read-only calls (documents and states from its
warm copy of the metadata; history, queries and readers read from etcd on a
standby); the others need the leader: a standby raises
:class:`NotLeaderError`, which names the leader for the client.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

import grpc

from multikafka.coordinator.access import AccessControl, Caller, Role, caller
from multikafka.coordinator.access.policy import Grant
from multikafka.coordinator.api.rpc import unary
from multikafka.coordinator.operations.replica_status import ServingReplica
from multikafka.coordinator.operations.reports import Reports, StreamReport
from multikafka.coordinator.operations.streams import StreamOperations
from multikafka.core._references import references_in
from multikafka.core.exceptions import PermissionDeniedError, ValidationError, shown
from multikafka.core.model import DEFAULT_MARGIN_MS, STRATEGY_NAMES, FailoverStrategy, StreamSpec
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
        access: AccessControl | None = None,
    ) -> None:
        self._operations = operations
        self._reports = reports
        self._replica = replica
        self._access = access

    def _caller(self) -> Caller:
        return caller(self._access)

    def _operated(self, name: str, field: str) -> str:
        """The stream a request names, which the caller must operate (checked
        before anything is looked up: a refusal says nothing of the stream)."""
        stream = validate_name(name, field)
        self._caller().require(Role.OPERATOR, stream)
        return stream

    def _stream_cluster(self, request: admin_pb2.ClusterRequest) -> tuple[str, str]:
        return self._operated(request.stream, "stream"), validate_name(request.cluster, "cluster")

    def _note(self, stream: str, what: str, cluster: str = "") -> None:
        """Put who asked for a change in the stream's history."""
        who = self._caller().name
        if who:
            self._operations().note(stream, what, who, cluster=cluster)

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
        _check_put(self._caller(), spec)
        info = _stream_info(await operations.put_stream(spec, request.expected_version))
        self._note(spec.name, f"document put (version {info.version})")
        return info

    @unary
    async def GetStream(
        self, request: admin_pb2.GetStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return _stream_info(self._reports().stream(self._operated(request.name, "name")))

    @unary
    async def ListStreams(
        self, request: admin_pb2.ListStreamsRequest, context: Ctx
    ) -> admin_pb2.ListStreamsResponse:
        who = self._caller()
        return admin_pb2.ListStreamsResponse(
            streams=[
                _stream_info(r)
                for r in self._reports().streams()
                if who.may(Role.OPERATOR, r.view.name)
            ]
        )

    @unary
    async def DeleteStream(
        self, request: admin_pb2.DeleteStreamRequest, context: Ctx
    ) -> admin_pb2.DeleteStreamResponse:
        name = self._operated(request.name, "name")
        deleted = await self._operations().delete_stream(name)
        return admin_pb2.DeleteStreamResponse(deleted=deleted)

    @unary
    async def StreamHistory(
        self, request: admin_pb2.StreamHistoryRequest, context: Ctx
    ) -> admin_pb2.StreamHistoryResponse:
        name = self._operated(request.name, "name")
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
                    principal=e.principal,
                )
                for e in entries
            ]
        )

    @unary
    async def DrainCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        stream, cluster = self._stream_cluster(request)
        info = _stream_info(await operations.drain(stream, cluster))
        self._note(stream, "drain requested", cluster)
        return info

    @unary
    async def FailCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        stream, cluster = self._stream_cluster(request)
        info = _stream_info(await operations.fail(stream, cluster))
        self._note(stream, "fail requested", cluster)
        return info

    @unary
    async def ActivateCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        operations = self._operations()
        stream, cluster = self._stream_cluster(request)
        info = _stream_info(await operations.activate(stream, cluster))
        self._note(stream, "activate requested", cluster)
        return info

    @unary
    async def Failover(
        self, request: admin_pb2.FailoverRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        stream = self._operated(request.stream, "stream")
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
        self._note(stream, f"failover {src} -> {dst} ({strategy.value}) requested", src)
        return _stream_info(report)

    @unary
    async def ListReaders(
        self, request: admin_pb2.ListReadersRequest, context: Ctx
    ) -> admin_pb2.ListReadersResponse:
        who = self._caller()
        readers = []
        for a in await self._reports().readers():
            # An operator sees the agents its own principals registered and
            # those reading its streams, and of what they read its streams only.
            mine = [s for s in a.sub_readers if who.may(Role.OPERATOR, s.split("/", 1)[0])]
            if not who.everything and not mine and (not a.principal or a.principal != who.name):
                continue
            readers.append(
                admin_pb2.ReaderInfo(
                    agent_id=a.agent_id,
                    host=a.host,
                    pid=a.pid,
                    applied_generation=a.applied_generation,
                    last_heartbeat_ms=a.last_heartbeat_ms,
                    sub_readers=sorted(mine),
                    subscribed=a.queue is not None,
                    converter=a.converter,
                )
            )
        return admin_pb2.ListReadersResponse(readers=readers)

    @unary
    async def ListAssignments(
        self, request: admin_pb2.ListAssignmentsRequest, context: Ctx
    ) -> admin_pb2.ListAssignmentsResponse:
        name = self._operated(request.stream, "stream")
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
        who = self._caller()
        return admin_pb2.ListQueriesResponse(
            queries=[
                admin_pb2.QueryInfo(
                    query_id=q.query_id, stream=q.stream, offsets=q.offsets, updated_ms=q.updated_ms
                )
                for q in await self._reports().queries()
                if who.may(Role.OPERATOR, q.stream)
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

    @unary
    async def ListGrants(
        self, request: admin_pb2.ListGrantsRequest, context: Ctx
    ) -> admin_pb2.ListGrantsResponse:
        who = self._caller()
        access = self._access
        grants: list[Grant] = access.grants() if access is not None else []
        if not who.everything:
            own = set(who.rights.grants)
            grants = [g for g in grants if g in own]
        policy = access.policy if access is not None else None
        return admin_pb2.ListGrantsResponse(
            caller=who.name,
            grants=[
                admin_pb2.GrantInfo(
                    principal=g.principal,
                    role=g.role.label,
                    streams=list(g.streams),
                    references=list(g.references),
                )
                for g in grants
            ],
            source=policy.source if policy is not None else "",
            problem=access.problem if access is not None else "",
        )


def _check_put(who: Caller, spec: StreamSpec) -> None:
    """The caller operates the stream, and its document's ConfigProvider
    references are ones its grants allow (an operator may not point the
    coordinator at another team's secret files; admins may use any)."""
    who.require(Role.OPERATOR, spec.name)
    allowed = who.rights.references_allowed(spec.name)
    if allowed is None:
        return
    for cid, cluster in spec.clusters.items():
        for key, value in cluster.properties.items():
            for ref in references_in(value):
                target = f"env:{ref.key}" if ref.provider == "env" else f"{ref.path}/{ref.key}"
                if not any(fnmatchcase(target, glob) for glob in allowed):
                    who.refused(Role.ADMIN, spec.name, "reference not granted")
                    raise PermissionDeniedError(
                        f"clusters.{cid}.properties.{key}: {who.rights.name} may not use the "
                        f"reference {shown(ref.text)} in stream {shown(spec.name)}: the access "
                        "policy grants it no references matching it (an operator grant's "
                        "'references' globs)"
                    )


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
