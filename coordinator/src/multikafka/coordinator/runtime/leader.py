"""What only the leader does, for one term of leadership.

When a replica is elected it creates :class:`LeaderDuties`: the stores the
leader writes (query progress, read marks, history) are loaded fresh from
etcd (a standby's copies would be stale), and partition discovery, the
reconciler, the agent registry and the cluster lifecycle start. When it is
deposed they all stop and are dropped: nothing of a term survives into the
next but what is in etcd. Every write they make goes through the fenced etcd
client, so a deposed leader's late write is refused.

The term's use cases, which the gRPC services call, are built over these
components here: :attr:`LeaderDuties.batches` (Planner),
:attr:`LeaderDuties.link` (Reader), :attr:`LeaderDuties.operations` and
:attr:`LeaderDuties.reports` (Admin).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from multikafka.coordinator.agents.link import AgentLink
from multikafka.coordinator.agents.reconcile import Reconciler
from multikafka.coordinator.agents.registry import AgentRegistry
from multikafka.coordinator.agents.task_slots import TaskSlots
from multikafka.coordinator.clusters.discovery import Discovery, MetadataClientFactory
from multikafka.coordinator.clusters.lifecycle import ClusterLifecycle
from multikafka.coordinator.config import CoordinatorConfig
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.operations.reports import LeaderReports
from multikafka.coordinator.operations.streams import StreamOperations
from multikafka.coordinator.planning.batches import MicroBatches
from multikafka.coordinator.planning.entry import EntryOffsets
from multikafka.coordinator.planning.watermarks import Watermarks
from multikafka.coordinator.state.etcd import FencedEtcd
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.translation import Abandonments, FailoverTranslator, ReadMarks
from multikafka.coordinator.translation.mm2.tracker import MirrorSyncs

logger = logging.getLogger(__name__)

#: How long each part of a term may take to stop before the others go on.
STOP_PART_S = 10.0


class LeaderDuties:
    def __init__(
        self,
        config: CoordinatorConfig,
        store: MetadataStore,
        etcd: FencedEtcd,
        metrics: Metrics,
        executor: Executor,
        client_factory: MetadataClientFactory,
    ) -> None:
        prefix = config.etcd_prefix.rstrip("/")
        self.store = store
        self.metrics = metrics
        self.history = History(etcd, prefix, config.history_size)
        self.queries = QueryStore(etcd, prefix, flush_interval_s=config.progress_flush_s)
        self.marks = ReadMarks(etcd, prefix)
        self.registry = AgentRegistry(etcd, prefix, config.reader_ttl_s)
        self.discovery = Discovery(
            config, executor, client_factory=client_factory, on_shrink=self._shrunk
        )
        self.syncs = MirrorSyncs(etcd, prefix, store, self.discovery, metrics)
        self.lifecycle = ClusterLifecycle(
            store,
            self.discovery,
            self.queries,
            self.history,
            metrics,
            mm2_coverage=self.syncs.coverage,
        )
        self.reconciler = Reconciler(
            store,
            self.discovery,
            self.registry,
            self.lifecycle.wake,
            self.history,
            metrics,
            forget=self.marks.forget,
        )
        self.abandonments = Abandonments(self.queries, self.history, metrics)
        self.translator = FailoverTranslator(
            self.discovery, self.marks, self.syncs, wait_s=config.translation_wait_s
        )
        self.entry = EntryOffsets(self.discovery, self.translator)
        self.watermarks = Watermarks(self.discovery, max_age_s=config.watermark_max_age_s)
        # -- the use cases of the term ---------------------------------------
        slots = TaskSlots()
        self.batches = MicroBatches(
            self.discovery,
            self.watermarks,
            self.entry,
            self.queries,
            self.abandonments,
            self.history,
            metrics,
            hand_out_secrets=config.readers_authenticated,
            slots=slots,
        )
        self.link = AgentLink(
            store, self.registry, self.reconciler, self.marks, self.abandonments, metrics, slots
        )
        self.reports = LeaderReports(
            store, self.discovery, metrics, self.history, self.queries, self.registry
        )
        self.operations = StreamOperations(
            store,
            self.lifecycle,
            self.history,
            self.marks,
            self.registry,
            self.reports,
            self.translator,
            self.queries,
        )
        #: Set once :meth:`start` has loaded the term's state and started its work.
        self.started = False

    async def load(self) -> None:
        """Read the leader's state from etcd and take the streams as they are."""
        await self.history.load()
        await self.queries.load()
        await self.marks.load()
        await self.syncs.load()
        await self.reconciler.start()

    async def run(self) -> None:
        """Start the background work: discovery, marks and history
        persistence, the agent registry, the lifecycle checks."""
        self.history.start()
        await self.registry.start()
        self.discovery.start()
        self.marks.start()
        self.queries.start()
        self.syncs.start()
        self.lifecycle.start()

    async def start(self) -> None:
        await self.load()
        await self.run()
        self.started = True

    async def stop(self) -> None:
        """Stop everything of this term (writes still pending are tried once;
        a deposed leader's are refused by the fence). Each part gets
        ``STOP_PART_S``: one that fails or hangs (a flush to an etcd that does
        not answer) is logged and left, and the parts after it still stop, so
        a deposed leader keeps no clients, threads or connections."""
        started = time.monotonic()

        async def reconciler() -> None:
            self.reconciler.stop()

        parts: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("cluster lifecycle", self.lifecycle.stop),
            ("reconciler", reconciler),
            ("agent registry", self.registry.stop),
            ("read marks", self.marks.stop),
            ("query progress", self.queries.stop),
            ("watermarks", self.watermarks.close),
            ("MM2 offset syncs", self.syncs.stop),
            ("history", self.history.stop),
            ("cluster clients", self.discovery.close),
        ]
        for name, stop in parts:
            try:
                await asyncio.wait_for(stop(), STOP_PART_S)
            except asyncio.TimeoutError:
                logger.warning(
                    "stopping the leader's %s took over %.0f s; left behind", name, STOP_PART_S
                )
            except Exception:
                logger.exception("stopping the leader's %s failed; left behind", name)
        logger.info("the leader's duties stopped in %.1f s", time.monotonic() - started)

    def _shrunk(self, stream: str, cluster: str, topic: str, known: int, seen: int) -> None:
        self.metrics.shrunk.labels(stream, cluster).inc()
        self.history.record(
            stream,
            "partitions-shrunk",
            cluster=cluster,
            detail=f"topic {topic} shows {seen} partitions, {known} were known; keeping {known} (alert)",
            generation=self.store.revision,
        )
