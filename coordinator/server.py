"""The coordinator process: wires metadata, discovery, planning, reconcile and
the gRPC services together, and serves them (plus health checking,
reflection and Prometheus metrics)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from coordinator.admin_service import AdminAuthInterceptor, AdminService
from coordinator.agent_registry import AgentRegistry
from coordinator.config import CoordinatorConfig, TlsFiles
from coordinator.discovery import Discovery, MetadataClientFactory
from coordinator.entry import EntryOffsets
from coordinator.etcd import Etcd
from coordinator.history import History
from coordinator.metadata import MetadataStore
from coordinator.metrics import Metrics
from coordinator.operations import ClusterOperations
from coordinator.planner_service import PlannerService
from coordinator.queries import QueryStore
from coordinator.reader_service import ReaderService
from coordinator.reconcile import Reconciler
from coordinator.supervisor import Supervisor
from coordinator.translation import Abandonments, FailoverTranslator, ReadMarks
from multikafka_core.exceptions import UnavailableError
from multikafka_core.providers.kafka import KafkaMetadataClient
from multikafka_core.retry import Backoff, retry_async
from multikafka_core.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    planner_pb2,
    planner_pb2_grpc,
    reader_pb2,
    reader_pb2_grpc,
)

logger = logging.getLogger(__name__)

SERVICE_NAMES = (
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
    planner_pb2.DESCRIPTOR.services_by_name["Planner"].full_name,
    reader_pb2.DESCRIPTOR.services_by_name["Reader"].full_name,
)


class Coordinator:
    """One coordinator. ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        client_factory: MetadataClientFactory = KafkaMetadataClient,
    ) -> None:
        self.config = config
        self._client_factory = client_factory
        self._executor = ThreadPoolExecutor(
            config.kafka_threads, thread_name_prefix="multikafka-kafka"
        )
        self.etcd = Etcd(config.etcd)
        self.metrics = Metrics()
        p = config.etcd_prefix.rstrip("/")
        self.history = History(self.etcd, p, config.history_size)
        self.store = MetadataStore(self.etcd, p)
        self.queries = QueryStore(self.etcd, p)
        self.marks = ReadMarks(self.etcd, p)
        self.registry = AgentRegistry(self.etcd, p, config.reader_ttl_s)
        self.discovery = Discovery(
            config, self._executor, client_factory=client_factory, on_shrink=self._shrunk
        )
        self.operations = ClusterOperations(
            self.store, self.discovery, self.queries, self.history, self.metrics
        )
        self.reconciler = Reconciler(
            self.store, self.discovery, self.registry, self.operations, self.history, self.metrics
        )
        self.supervisor = Supervisor(
            self.store, self.discovery, self.operations, self.queries, self.history
        )
        self.abandonments = Abandonments(self.queries, self.history, self.metrics)
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._metrics_http: Any = None
        self.port = 0
        self.metrics_port = 0

    @property
    def address(self) -> str:
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{self.port}"

    async def start(self, *, etcd_wait_s: float = 30.0) -> None:
        await self._connect(etcd_wait_s)
        await self.history.load()
        self.history.start()
        await self.queries.load()
        await self.marks.load()
        await self.registry.start()
        await self.store.start()
        self.discovery.start()
        self.marks.start()
        self.supervisor.start()
        await self._serve()
        listen = f"{self.config.listen.rsplit(':', 1)[0]}:{self.port}"
        logger.info("coordinator serving", extra={"address": listen, "etcd": str(self.config.etcd)})

    async def _connect(self, wait_s: float) -> None:
        async def reach() -> None:
            await self.etcd.connect()
            await self.etcd.get_prefix(f"{self.config.etcd_prefix}/streams/")

        await retry_async(
            reach,
            on=(UnavailableError,),
            deadline_s=wait_s,
            backoff=Backoff.constant(0.5),
            on_retry=lambda exc, _: logger.info("waiting for etcd at %s", self.config.etcd),
        )

    async def _serve(self) -> None:
        interceptors = (
            [AdminAuthInterceptor(self.config.admin_token)] if self.config.admin_token else []
        )
        server = grpc.aio.server(interceptors=interceptors)
        admin_pb2_grpc.add_AdminServicer_to_server(
            AdminService(
                self.store,
                self.discovery,
                self.operations,
                self.registry,
                self.queries,
                self.history,
                self.marks,
            ),
            server,
        )
        planner_pb2_grpc.add_PlannerServicer_to_server(
            PlannerService(
                self.store,
                self.discovery,
                EntryOffsets(self.discovery, FailoverTranslator(self.discovery, self.marks)),
                self.queries,
                self.abandonments,
                self.history,
                self.metrics,
            ),
            server,
        )
        reader_pb2_grpc.add_ReaderServicer_to_server(
            ReaderService(
                self.registry,
                self.reconciler,
                self.marks,
                self.abandonments,
                self.metrics,
                self.config.heartbeat_interval_s,
            ),
            server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, reflection.SERVICE_NAME, health.SERVICE_NAME), server
        )
        if self.config.tls is not None:
            self.port = server.add_secure_port(
                self.config.listen, _server_credentials(self.config.tls)
            )
        else:
            self.port = server.add_insecure_port(self.config.listen)
        await server.start()
        self._server = server
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.metrics_listen:
            host, _, port = self.config.metrics_listen.rpartition(":")
            self._metrics_http, _ = start_http_server(
                int(port), addr=host or "0.0.0.0", registry=self.metrics.registry
            )
            self.metrics_port = self._metrics_http.server_port

    async def stop(self, grace_s: float = 1.0) -> None:
        await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
            self._metrics_http.server_close()
        await self.supervisor.stop()
        await self.reconciler.stop()
        await self.store.stop()
        await self.registry.stop()
        await self.marks.stop()
        await self.history.stop()
        await self.discovery.close()
        await self.etcd.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    def _shrunk(self, stream: str, cluster: str, topic: str, known: int, seen: int) -> None:
        self.metrics.shrunk.labels(stream, cluster).inc()
        self.history.record(
            stream,
            "partitions-shrunk",
            cluster=cluster,
            detail=f"topic {topic} shows {seen} partitions, {known} were known; keeping {known} (alert)",
            generation=self.store.revision,
        )


def _server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(Path(tls.key).read_bytes(), Path(tls.cert).read_bytes())],
        root_certificates=Path(tls.client_ca).read_bytes() if tls.client_ca else None,
        require_client_auth=bool(tls.client_ca),
    )
