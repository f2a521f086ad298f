"""A replica's gRPC server: the Admin, Planner and Reader services, wired
to what they call (the current term's use cases, which raise
:class:`NotLeaderError` on a standby; the replica's reports and status),
behind the auth and request-parsing interceptors, with health checking and
reflection, on TLS when the configuration has it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from multikafka.coordinator.access import AccessControl
from multikafka.coordinator.api.admin import AdminService
from multikafka.coordinator.api.auth import AuthInterceptor
from multikafka.coordinator.api.planner import PlannerService
from multikafka.coordinator.api.reader import ReaderService, add_reader_service
from multikafka.coordinator.api.rpc import ParseInterceptor
from multikafka.coordinator.config import CoordinatorConfig, TlsFiles
from multikafka.coordinator.operations.replica_status import ServingReplica
from multikafka.coordinator.operations.reports import Reports
from multikafka.coordinator.runtime.leader import LeaderDuties
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.v1 import admin_pb2, admin_pb2_grpc, planner_pb2, planner_pb2_grpc, reader_pb2

__all__ = ["MAX_REQUEST_BYTES", "SERVICE_NAMES", "start_grpc_server"]

SERVICE_NAMES = (
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
    planner_pb2.DESCRIPTOR.services_by_name["Planner"].full_name,
    reader_pb2.DESCRIPTOR.services_by_name["Reader"].full_name,
)
#: Largest request accepted (a stream document is refused above 1 MiB with a
#: clear message; beyond this gRPC refuses the message itself).
MAX_REQUEST_BYTES = 8 * 1024 * 1024


async def start_grpc_server(
    config: CoordinatorConfig,
    health_servicer: health.aio.HealthServicer,
    *,
    leading: Callable[[], LeaderDuties],
    reports: Callable[[], Reports],
    replica: ServingReplica,
    store: MetadataStore,
    access: AccessControl,
) -> tuple[grpc.aio.Server, int]:
    """The server, started, and the port it listens on."""
    interceptors: list[grpc.aio.ServerInterceptor] = [ParseInterceptor("/multikafka.v1.")]
    if access.enabled:
        # Without anything to check, a call pays nothing for authentication.
        interceptors.insert(0, AuthInterceptor(access, mtls=config.mtls))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
            ("grpc.keepalive_permit_without_calls", 1),
            # Clients ping every 3 s (multikafka.core.transport), during long
            # calls too: never answer them with "too many pings".
            ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
            ("grpc.http2.max_ping_strikes", 0),
        ],
    )
    admin_pb2_grpc.add_AdminServicer_to_server(
        AdminService(lambda: leading().operations, reports, replica, access), server
    )
    planner_pb2_grpc.add_PlannerServicer_to_server(
        PlannerService(lambda: leading().batches, store, access), server
    )
    add_reader_service(
        ReaderService(lambda: leading().link, store, config.heartbeat_interval_s, access), server
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, reflection.SERVICE_NAME, health.SERVICE_NAME), server
    )
    if config.tls is not None:
        port = server.add_secure_port(config.listen, _server_credentials(config.tls))
    else:
        port = server.add_insecure_port(config.listen)
    await server.start()
    return server, port


def _server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(Path(tls.key).read_bytes(), Path(tls.cert).read_bytes())],
        root_certificates=Path(tls.client_ca).read_bytes() if tls.client_ca else None,
        require_client_auth=bool(tls.client_ca),
    )
