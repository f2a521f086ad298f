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

import asyncio
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc

from multikafka.coordinator.agents.registry import AgentRegistry
from multikafka.coordinator.api.rpc import unary
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.state.stream_state import StreamView
from multikafka.core._secrets import REDACTED, is_secret
from multikafka.core.exceptions import UnavailableError, ValidationError, shown
from multikafka.core.model import DEFAULT_MARGIN_MS, ClusterSpec, FailoverStrategy, StreamSpec
from multikafka.core.validation import MAX_DOCUMENT_BYTES, parse_stream_json, validate_name
from multikafka.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from multikafka.coordinator.runtime.server import Coordinator

logger = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(self, coordinator: Coordinator) -> None:
        self._c = coordinator

    def _info(self, view: StreamView) -> admin_pb2.StreamInfo:
        duties = self._c.duties
        # What the leader counts (a replica that led before keeps old values).
        lag: dict[str, float] = {}
        read: dict[str, float] = {}
        planned: dict[str, float] = {}
        if duties is not None:
            lag = duties.metrics.per_cluster("lag", view.name)
            read = duties.metrics.per_cluster("agent_records", view.name)
            planned = duties.metrics.per_cluster("planned", view.name)
        clusters = []
        for cid, spec in sorted(view.spec.clusters.items()):
            cc = duties.discovery.client(view.name, cid) if duties is not None else None
            since_ms = 0
            if cc is not None:
                reachable = cc.health.reachable and cc.discovered
                error = cc.health.error
                partitions = sum(cc.partitions.values())
                if cc.health.unreachable_since is not None:
                    ago_s = time.monotonic() - cc.health.unreachable_since
                    since_ms = int((time.time() - ago_s) * 1000)
            else:
                reachable, partitions = False, 0
                error = (
                    "not set up yet"
                    if duties is not None
                    else f"unknown here: this replica is a standby (leader: {self._c.leader_address or 'none'})"
                )
            status = admin_pb2.ClusterStatus(
                cluster=cid,
                state=spec.state.to_proto(),
                reachable=reachable,
                error=error,
                partitions=partitions,
                drain_offsets=view.status.drains.get(cid, {}),
                unreachable_since_ms=since_ms,
                records_read=int(read.get(cid, 0)),
                records_planned=int(planned.get(cid, 0)),
            )
            if cid in lag and spec.state.readable:  # (the gauge keeps its last value)
                status.lag_records = int(lag[cid])
            clusters.append(status)
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
        self._c.leading()
        store = self._c.store
        spec = parse_stream_json(request.document_json)
        stored = store.find(spec.name)
        spec = _keep_stored_secrets(spec, stored.spec if stored is not None else None)
        revision = await store.put_stream(spec, request.expected_version)
        await store.wait_applied(revision)
        return self._info(store.get(spec.name))

    @unary
    async def GetStream(
        self, request: admin_pb2.GetStreamRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(self._c.store.get(validate_name(request.name, "name")))

    @unary
    async def ListStreams(
        self, request: admin_pb2.ListStreamsRequest, context: Ctx
    ) -> admin_pb2.ListStreamsResponse:
        return admin_pb2.ListStreamsResponse(streams=[self._info(v) for v in self._c.store.views()])

    @unary
    async def DeleteStream(
        self, request: admin_pb2.DeleteStreamRequest, context: Ctx
    ) -> admin_pb2.DeleteStreamResponse:
        name = validate_name(request.name, "name")
        duties = self._c.leading()
        self._c.store.get(name)
        deleted = await self._c.store.delete_stream(name)
        duties.history.forget(name)
        duties.marks.forget(name)
        return admin_pb2.DeleteStreamResponse(deleted=deleted)

    @unary
    async def StreamHistory(
        self, request: admin_pb2.StreamHistoryRequest, context: Ctx
    ) -> admin_pb2.StreamHistoryResponse:
        name = validate_name(request.name, "name")
        if request.limit < 0:
            raise ValidationError("limit", "must not be negative (0 means all that are kept)")
        duties = self._c.duties
        if duties is not None:
            history = duties.history
        else:  # a standby reads what the leader persisted
            history = History(self._c.etcd, self._c.prefix, self._c.config.history_size)
            await history.load()
        entries = history.entries(name, request.limit)
        if not entries:
            self._c.store.get(name)  # NOT_FOUND for a stream that never existed
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
        return self._info(await self._c.leading().lifecycle.drain(*_stream_cluster(request)))

    @unary
    async def FailCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(await self._c.leading().lifecycle.fail(*_stream_cluster(request)))

    @unary
    async def ActivateCluster(
        self, request: admin_pb2.ClusterRequest, context: Ctx
    ) -> admin_pb2.StreamInfo:
        return self._info(await self._c.leading().lifecycle.activate(*_stream_cluster(request)))

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
                "strategy", f"unknown strategy {shown(request.strategy)}; use timestamp or identity"
            ) from None
        view = await self._c.leading().lifecycle.failover(
            stream,
            src,
            dst,
            strategy=strategy,
            margin_ms=request.margin_ms if request.HasField("margin_ms") else DEFAULT_MARGIN_MS,
            reason=request.reason,
        )
        return self._info(view)

    @unary
    async def ListReaders(
        self, request: admin_pb2.ListReadersRequest, context: Ctx
    ) -> admin_pb2.ListReadersResponse:
        duties = self._c.duties
        if duties is not None:
            agents = duties.registry.agents()
        else:
            agents = await AgentRegistry.persisted(self._c.etcd, self._c.prefix)
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
                for a in agents
            ]
        )

    @unary
    async def ListAssignments(
        self, request: admin_pb2.ListAssignmentsRequest, context: Ctx
    ) -> admin_pb2.ListAssignmentsResponse:
        name = validate_name(request.stream, "stream")
        duties = self._c.leading()
        self._c.store.get(name)
        return admin_pb2.ListAssignmentsResponse(
            assignments=[
                admin_pb2.Assignment(agent_id=a.agent_id, splits=held)
                for a in duties.registry.agents()
                if (held := a.held(name))
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
                for q in await self._queries()
            ]
        )

    async def _queries(self) -> list[Any]:
        duties = self._c.duties
        if duties is not None:
            return duties.queries.all()
        queries = QueryStore(self._c.etcd, self._c.prefix)  # a standby reads etcd
        await queries.load()
        return queries.all()

    @unary
    async def Status(
        self, request: admin_pb2.StatusRequest, context: Ctx
    ) -> admin_pb2.StatusResponse:
        c = self._c
        etcd = admin_pb2.EtcdStatus(
            endpoints=[str(e) for e in c.config.etcd.endpoints], connected=str(c.etcd.endpoint)
        )
        try:
            etcd.version = await asyncio.wait_for(c.etcd.version(), 2.0)
            etcd.reachable = True
            replicas = await c.replicas()
        except (UnavailableError, asyncio.TimeoutError) as exc:
            etcd.error = str(exc) or "no answer within 2 s"
            replicas = []
        election = c.election
        leader = election.leader if election is not None else None
        return admin_pb2.StatusResponse(
            role="leader" if c.is_leader else "standby",
            leader=c.leader_address,
            id=c.id,
            address=c.address,
            etcd=etcd,
            generation=c.store.revision,
            elections=election.elections if election is not None else 0,
            replicas=[
                admin_pb2.ReplicaInfo(
                    id=r.id,
                    address=r.address,
                    role="leader" if leader is not None and r.id == leader.id else "standby",
                    since_ms=r.since_ms,
                )
                for r in replicas
            ],
        )


def _stream_cluster(request: admin_pb2.ClusterRequest) -> tuple[str, str]:
    return validate_name(request.stream, "stream"), validate_name(request.cluster, "cluster")


#: librdkafka settings that decide where a client connects and how it proves
#: who it is (a stored secret is only reused while these stay the same).
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "plugin.", "client.dns.")


def _where_and_how(cluster: ClusterSpec) -> tuple[str, dict[str, str]]:
    settings = {
        k: v
        for k, v in cluster.properties.items()
        if k.startswith(_CONNECTION_PREFIXES) and not is_secret(k)
    }
    return cluster.bootstrap_servers, settings


def _keep_stored_secrets(spec: StreamSpec, stored: StreamSpec | None) -> StreamSpec:
    """A document read back (secrets redacted) and put again keeps the stored
    secrets: only for a cluster reached the same way. A redacted secret with
    new brokers or new security settings is refused, or an admin (who never
    sees secrets) could send readers, with the real password, to brokers of
    their choosing. The marker itself is never stored."""
    clusters = {}
    for cid, c in spec.clusters.items():
        redacted = [k for k, v in c.properties.items() if v == REDACTED]
        if not redacted:
            clusters[cid] = c
            continue
        before = stored.clusters.get(cid) if stored is not None else None
        missing = [k for k in redacted if before is None or k not in before.properties]
        if before is None or missing:
            key = missing[0]
            raise ValidationError(
                f"clusters.{cid}.properties.{key}",
                f"is {REDACTED}, but there is no stored value to keep "
                f"(cluster {cid!r} has none for it): give the value",
            )
        if _where_and_how(before) != _where_and_how(c):
            raise ValidationError(
                f"clusters.{cid}.properties.{redacted[0]}",
                f"is {REDACTED}, but where or how the cluster is reached changed "
                "(bootstrap_servers, security.*, sasl.*, ssl.*): give the secret again "
                "with the new connection settings",
            )
        clusters[cid] = replace(c, properties=c.properties.merged_over(before.properties))
    return replace(spec, clusters=clusters)
