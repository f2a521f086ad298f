"""The Admin gRPC service: stream documents, cluster operations, and what the
coordinator knows about readers, assignments and queries. Secrets in stream
properties are never returned (they are redacted), and a document put back
with redacted values keeps the stored ones."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import grpc

from coordinator.agent_registry import AgentRegistry
from coordinator.discovery import Discovery
from coordinator.history import History
from coordinator.metadata import MetadataStore
from coordinator.operations import ClusterOperations
from coordinator.queries import QueryStore
from coordinator.rpc import unary
from coordinator.stream_state import StreamView
from coordinator.translation.marks import ReadMarks
from multikafka_core.exceptions import ValidationError
from multikafka_core.model import FailoverStrategy, StreamSpec
from multikafka_core.v1 import admin_pb2, admin_pb2_grpc
from multikafka_core.validation import parse_stream_json, validate_name

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]
ADMIN_PREFIX = "/multikafka.v1.Admin/"
Req = TypeVar("Req")
Resp = TypeVar("Resp")


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        store: MetadataStore,
        discovery: Discovery,
        operations: ClusterOperations,
        registry: AgentRegistry,
        queries: QueryStore,
        history: History,
        marks: ReadMarks,
    ) -> None:
        self._store = store
        self._discovery = discovery
        self._ops = operations
        self._registry = registry
        self._queries = queries
        self._history = history
        self._marks = marks

    def _info(self, view: StreamView) -> admin_pb2.StreamInfo:
        clusters = []
        for cid, spec in sorted(view.spec.clusters.items()):
            cc = self._discovery.client(view.name, cid)
            clusters.append(
                admin_pb2.ClusterStatus(
                    cluster=cid,
                    state=spec.state.value,
                    reachable=cc is not None and cc.health.reachable and cc.discovered,
                    error=cc.health.error if cc is not None else "not set up yet",
                    partitions=sum(cc.partitions.values()) if cc is not None else 0,
                    drain_offsets=view.status.drains.get(cid, {}),
                )
            )
        return admin_pb2.StreamInfo(
            name=view.name,
            document_json=view.spec.to_json(redact=True),
            version=view.spec_revision,
            generation=view.generation,
            clusters=clusters,
        )

    @unary
    async def PutStream(
        self, request: admin_pb2.PutStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        spec = parse_stream_json(request.document_json)
        stored = self._store.find(spec.name)
        if stored is not None:
            spec = _keep_stored_secrets(spec, stored.spec)
        revision = await self._store.put_stream(spec, request.expected_version)
        await self._store.wait_applied(revision)
        return self._info(self._store.get(spec.name))

    @unary
    async def GetStream(
        self, request: admin_pb2.GetStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(self._store.get(validate_name(request.name, "name")))

    @unary
    async def ListStreams(
        self, request: admin_pb2.ListStreamsRequest, context: Ctx
    ) -> admin_pb2.ListStreamsResponse:
        return admin_pb2.ListStreamsResponse(streams=[self._info(v) for v in self._store.views()])

    @unary
    async def DeleteStream(
        self, request: admin_pb2.DeleteStreamRequest, context: Ctx
    ) -> admin_pb2.DeleteStreamResponse:
        name = validate_name(request.name, "name")
        self._store.get(name)
        deleted = await self._store.delete_stream(name)
        self._history.forget(name)
        self._marks.forget(name)
        return admin_pb2.DeleteStreamResponse(deleted=deleted)

    @unary
    async def StreamHistory(
        self, request: admin_pb2.StreamHistoryRequest, context: Ctx
    ) -> admin_pb2.StreamHistoryResponse:
        name = validate_name(request.name, "name")
        entries = self._history.entries(name, request.limit)
        if not entries:
            self._store.get(name)  # NOT_FOUND for a stream that never existed
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
        return self._info(await self._ops.drain(*_stream_cluster(request)))

    @unary
    async def FailCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(await self._ops.fail(*_stream_cluster(request)))

    @unary
    async def ActivateCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(await self._ops.activate(*_stream_cluster(request)))

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
                "strategy", f"unknown strategy {request.strategy!r}; use timestamp or identity"
            ) from None
        if request.margin_ms < 0:
            raise ValidationError("margin_ms", "must not be negative")
        view = await self._ops.failover(
            stream,
            src,
            dst,
            strategy=strategy,
            margin_ms=request.margin_ms if request.HasField("margin_ms") else 30_000,
            reason=request.reason,
        )
        return self._info(view)

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
                )
                for a in self._registry.agents()
            ]
        )

    @unary
    async def ListAssignments(
        self, request: admin_pb2.ListAssignmentsRequest, context: Ctx
    ) -> admin_pb2.ListAssignmentsResponse:
        name = validate_name(request.stream, "stream")
        self._store.get(name)
        return admin_pb2.ListAssignmentsResponse(
            assignments=[
                admin_pb2.Assignment(agent_id=a.agent_id, splits=sorted(a.holdings[name]))
                for a in self._registry.agents()
                if a.holdings.get(name)
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
                for q in self._queries.all()
            ]
        )


def _stream_cluster(request: admin_pb2.ClusterRequest) -> tuple[str, str]:
    return validate_name(request.stream, "stream"), validate_name(request.cluster, "cluster")


def _keep_stored_secrets(spec: StreamSpec, stored: StreamSpec) -> StreamSpec:
    clusters = {
        cid: replace(c, properties=c.properties.merged_over(stored.clusters[cid].properties))
        if cid in stored.clusters
        else c
        for cid, c in spec.clusters.items()
    }
    return replace(spec, clusters=clusters)


class AdminAuthInterceptor(grpc.aio.ServerInterceptor):
    """Requires ``authorization: Bearer <token>`` on every Admin call."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def intercept_service(  # type: ignore[override]  # types-grpcio: generic method
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if not handler_call_details.method.startswith(ADMIN_PREFIX):
            return await continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = str(metadata.get("authorization", ""))
        if given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), self._token):
            return await continuation(handler_call_details)
        return _deny(
            "admin calls need 'authorization: Bearer <token>' (multikafka admin --token or MULTIKAFKA_ADMIN_TOKEN)"
        )


def _deny(message: str) -> grpc.RpcMethodHandler[Req, Resp]:
    async def abort(request: Req, context: Ctx) -> Resp:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        raise AssertionError("unreachable: context.abort raises")

    return grpc.unary_unary_rpc_method_handler(abort)
