"""The coordinator process: one replica of the coordinator service.

Every replica keeps a warm copy of the metadata (the etcd watch), serves the
gRPC services (:mod:`.services`: Admin, Planner, Reader, health, reflection)
and the HTTP listener (metrics and probes), announces itself under
``<prefix>/replicas/`` (:mod:`.presence`) and campaigns for leadership
(:mod:`.election`). The leader alone runs the duties of a term and its use
cases (:mod:`.leader`); a standby answers read-only calls (its reports read
etcd) and tells clients where the leader is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2

from multikafka.coordinator.access import AccessControl
from multikafka.coordinator.clusters.discovery import MetadataClientFactory
from multikafka.coordinator.clusters.kafka import KafkaMetadataClient
from multikafka.coordinator.config import CoordinatorConfig
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.operations.replica_status import EtcdHealth, PeerReplica, ReplicaStatus
from multikafka.coordinator.operations.reports import Reports, StandbyReports
from multikafka.coordinator.runtime.election import Election, Replica
from multikafka.coordinator.runtime.leader import LeaderDuties
from multikafka.coordinator.runtime.presence import Presence
from multikafka.coordinator.runtime.probes import ProbeServer
from multikafka.coordinator.runtime.services import SERVICE_NAMES, start_grpc_server
from multikafka.coordinator.state.etcd import Etcd, Fence, FencedEtcd
from multikafka.coordinator.state.leases import LeaseRenewals
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.core._background import BackgroundTasks
from multikafka.core.exceptions import LeaderStartingError, NotLeaderError, UnavailableError
from multikafka.core.retry import Backoff, retry_async

logger = logging.getLogger(__name__)

#: gRPC health service name that is SERVING on the leader only.
LEADER_HEALTH = "multikafka.leader"


class Coordinator:
    """One coordinator replica. ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        client_factory: MetadataClientFactory = KafkaMetadataClient,
    ) -> None:
        self.config = config
        self.prefix = config.etcd_prefix.rstrip("/")
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.metrics = Metrics()
        #: Who may call what (the access policy, re-read when it changes).
        self.access = AccessControl(
            config.access_policy,
            admin_token=config.admin_token,
            reader_token=config.reader_token,
            any_certificate=config.mtls,
            metrics=self.metrics,
        )
        self.etcd = Etcd(config.etcd)
        self.fenced = FencedEtcd(self.etcd, self._fence, self._fenced)
        self.store = MetadataStore(self.fenced, self.prefix)
        #: What this replica tells operators while it does not lead.
        self._standby_reports = StandbyReports(
            self.store,
            self.etcd,
            self.prefix,
            config.history_size,
            lambda: self.leader_address,
        )
        self.election: Election | None = None
        #: The current term's duties while this replica leads.
        self.duties: LeaderDuties | None = None
        self._client_factory = client_factory
        self._executor = ThreadPoolExecutor(
            config.kafka_threads, thread_name_prefix="multikafka-kafka"
        )
        self._tasks = BackgroundTasks("coordinator")
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._probes: ProbeServer | None = None
        self._etcd_ok = False
        self.started_ms = int(time.time() * 1000)
        self._presence = Presence(
            self.etcd,
            self.prefix,
            lambda: Replica(self.id, self.address, self.started_ms),
            ttl_s=max(int(config.lease_ttl_s * 3), 3),
        )
        self.port = 0
        self.metrics_port = 0

    # -- what services and probes ask ---------------------------------------------

    @property
    def address(self) -> str:
        """Where clients reach this replica (its advertised address)."""
        return self.config.advertised(self.port)

    @property
    def is_leader(self) -> bool:
        """Elected, its term valid, and the term's duties started (a replica
        whose duties are still loading, or failed to, is not yet the leader)."""
        duties = self.duties
        return (
            self.election is not None
            and self.election.is_leader
            and duties is not None
            and duties.started
        )

    @property
    def leader_address(self) -> str:
        leader = self.election.leader if self.election is not None else None
        return leader.address if leader is not None else ""

    def leading(self) -> LeaderDuties:
        """The duties of the current term; :class:`NotLeaderError` (naming the
        leader) on a standby, :class:`LeaderStartingError` while a new term's
        duties are loading (a call answered then would see clusters not set
        up yet: clients retry, as on any takeover)."""
        duties = self.duties
        if duties is None or self.election is None or not self.election.is_leader:
            raise NotLeaderError(self.leader_address)
        if not duties.started:
            raise LeaderStartingError(self.address)
        return duties

    def reports(self) -> Reports:
        """What this replica tells operators: the term's reports while it
        leads (or its term is ending), else a standby's (also while a new
        term's duties are loading)."""
        duties = self.duties
        return duties.reports if duties is not None and duties.started else self._standby_reports

    async def status(self) -> ReplicaStatus:
        """This replica, etcd as it sees it, and the replicas announced there."""
        endpoints = [str(e) for e in self.config.etcd.endpoints]
        connected = str(self.etcd.endpoint)
        version, reachable, error = "", False, ""
        try:
            version = await asyncio.wait_for(self.etcd.version(), 2.0)
            reachable = True
            replicas = await self._presence.replicas()
        except (UnavailableError, asyncio.TimeoutError) as exc:
            error = str(exc) or "no answer within 2 s"
            replicas = []
        election = self.election
        leader = election.leader if election is not None else None
        return ReplicaStatus(
            role="leader" if self.is_leader else "standby",
            leader=self.leader_address,
            id=self.id,
            address=self.address,
            etcd=EtcdHealth(endpoints, connected, reachable, version, error),
            generation=self.store.revision,
            elections=election.elections if election is not None else 0,
            replicas=[
                PeerReplica(
                    r.id,
                    r.address,
                    "leader" if leader is not None and r.id == leader.id else "standby",
                    r.since_ms,
                )
                for r in replicas
            ],
        )

    @property
    def can_serve(self) -> bool:
        """Connected to etcd with a warm copy of the metadata: the leader
        serves everything, a standby the read-only calls (and points clients
        to the leader). A leader is not required: during a takeover every
        replica stays ready, so a Service keeps endpoints that answer
        "retry" instead of refusing connections."""
        return self.store.ready.is_set() and self._etcd_ok

    # -- lifecycle ----------------------------------------------------------------

    async def start(self, *, etcd_wait_s: float = 30.0) -> None:
        if self.config.access_policy:
            # Read before serving; a bad or missing file refuses every call
            # (but health) until a good one is in place.
            await asyncio.to_thread(self.access.load)
            self._tasks.every(
                "access policy",
                self.config.access_policy_interval_s,
                lambda: asyncio.to_thread(self.access.load),
            )
        await self._connect(etcd_wait_s)
        await self.store.start()
        await self._serve()
        self.election = Election(
            self.etcd,
            self.prefix,
            Replica(self.id, self.address, self.started_ms),
            ttl_s=self.config.lease_ttl_s,
            metrics=self.metrics,
            on_elected=self._elected,
            on_deposed=self._deposed,
            renewals=lambda: LeaseRenewals(self.config.etcd),
        )
        self._tasks.spawn("election", self.election.run())
        self._tasks.every("presence", self.config.lease_ttl_s / 3, self._announce)
        self._tasks.every("health", 0.25, self._update_health)
        await self._announce()
        await self._update_health()
        logger.info(
            "coordinator serving",
            extra={"address": self.address, "etcd": str(self.config.etcd)},
        )

    async def _connect(self, wait_s: float) -> None:
        async def reach() -> None:
            await self.etcd.connect()
            await self.etcd.get_prefix(f"{self.prefix}/streams/")

        # A short wait says nothing; a long one says so after 5 s, then every 10 s.
        next_note = [time.monotonic() + 5]

        def waiting(exc: BaseException, delay_s: float) -> None:
            if time.monotonic() >= next_note[0]:
                next_note[0] = time.monotonic() + 10
                logger.warning("waiting for etcd at %s: %s", self.config.etcd, exc)

        await retry_async(
            reach,
            on=(UnavailableError,),
            deadline_s=wait_s,
            backoff=Backoff.constant(0.5),
            on_retry=waiting,
        )
        self._etcd_ok = True

    async def _elected(self) -> None:
        duties = LeaderDuties(
            self.config,
            self.store,
            self.fenced,
            self.metrics,
            self._executor,
            self._client_factory,
        )
        self.duties = duties
        try:
            await duties.start()
        except BaseException:
            self.duties = None
            await duties.stop()
            raise
        await self._update_health()

    async def _deposed(self) -> None:
        duties, self.duties = self.duties, None
        await self._update_health()
        if duties is not None:
            await duties.stop()

    def _fence(self) -> Fence | None:
        return self.election.fence() if self.election is not None else None

    def _fenced(self) -> None:
        if self.election is not None:
            self.election.lost()

    async def _announce(self) -> None:
        """Keep this replica's entry under ``<prefix>/replicas/`` (for ``status``)."""
        try:
            await self._presence.announce()
        except UnavailableError:
            self._etcd_ok = False
            raise
        self._etcd_ok = True

    async def _update_health(self) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        can = serving if self.can_serve else not_serving
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, can)
        await self._health.set(LEADER_HEALTH, serving if self.is_leader else not_serving)
        agents = self.duties.registry.agents() if self.duties is not None else []
        self.metrics.readers.set(len(agents))
        self.metrics.count_converters(a.converter for a in agents)

    async def _serve(self) -> None:
        self._server, self.port = await start_grpc_server(
            self.config,
            self._health,
            leading=self.leading,
            reports=self.reports,
            replica=self,
            store=self.store,
            access=self.access,
        )
        if self.config.metrics_listen:
            self._probes = ProbeServer(self.config.metrics_listen, self, self.metrics.registry)
            self.metrics_port = self._probes.port

    async def stop(self, grace_s: float = 1.0) -> None:
        """Resign leadership at once (a standby takes over without waiting
        for the lease to expire), then stop serving."""
        await self._health.enter_graceful_shutdown()
        if self.election is not None:
            self.election.resign()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.election.finished.wait(), self.config.lease_ttl_s)
        await self._tasks.stop()
        if self.duties is not None:  # the election loop did not get to it
            await self._deposed()
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._probes is not None:
            self._probes.close()
        await self._presence.withdraw()
        await self.store.stop()
        await self.etcd.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
