"""Partition discovery and offsets, per cluster of every stream.

One :class:`ClusterClient` per (stream, cluster); clusters with the same
connection settings (several streams on one physical cluster) share one
provider metadata client and one reachability record. Partition counts are
re-discovered in the background (one request per physical cluster) and on
every metadata change; offsets are asked when a batch is planned (high
watermarks through :mod:`multikafka.coordinator.planning.watermarks`). A
cluster that fails a request is *unreachable*: for a short backoff it is not
asked again (planning skips it, so it never stalls the other clusters), and
the time it became unreachable drives automatic failover.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TypeVar

from multikafka.coordinator.clusters.kafka import (
    KafkaMetadataClient,
    MetadataClient,
    OffsetQuery,
    UnresolvedClient,
    Visit,
)
from multikafka.coordinator.config import CoordinatorConfig
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core._background import BackgroundTasks
from multikafka.core._offsets import Splits
from multikafka.core._references import UnresolvedReferenceError
from multikafka.core.exceptions import UnavailableError
from multikafka.core.kafka_log import ServesStreams
from multikafka.core.model import ClusterSpec, ClusterState, Connection, SplitId

logger = logging.getLogger(__name__)

T = TypeVar("T")
MetadataClientFactory = Callable[[Connection], MetadataClient]
#: Called with (stream, cluster, topic, known, seen) when a partition count drops.
ShrinkListener = Callable[[str, str, str, int, int], None]


@dataclass
class Health:
    reachable: bool = True
    error: str = ""
    #: ``time.monotonic()`` of the first failure of the current outage.
    unreachable_since: float | None = None
    #: Do not ask the cluster again before this ``time.monotonic()``.
    retry_at: float = 0.0


@dataclass
class SharedClient:
    """One metadata client per distinct connection, shared by every
    (stream, cluster) that uses it."""

    client: MetadataClient
    health: Health = field(default_factory=Health)
    users: int = 0


@dataclass
class ClusterClient:
    stream: str
    cluster: str
    spec: ClusterSpec
    shared: SharedClient
    #: topic -> partition count (never decreases while the client lives).
    partitions: dict[str, int] = field(default_factory=dict)
    discovered: bool = False

    @property
    def client(self) -> MetadataClient:
        return self.shared.client

    @property
    def health(self) -> Health:
        return self.shared.health

    @property
    def fingerprint(self) -> str:
        return self.spec.connection(self.cluster).fingerprint

    #: (topics and counts it was built from, splits, their (topic, partition)).
    _table: tuple[object, Splits, list[tuple[str, int]]] | None = field(
        default=None, repr=False, compare=False
    )

    def splits(self) -> list[SplitId]:
        return [
            SplitId(self.cluster, topic, p)
            for topic in self.spec.topics
            for p in range(self.partitions.get(topic, 0))
        ]

    def split_table(self) -> tuple[Splits, list[tuple[str, int]]]:
        """The discovered splits in columns, and as the ``(topic, partition)``
        pairs a metadata client takes; built again only when the topics or
        partition counts change (planning a batch of 100,000 splits must not
        build them every time)."""
        key = tuple((t, self.partitions.get(t, 0)) for t in self.spec.topics)
        if self._table is None or self._table[0] != key:
            splits = Splits.from_counts(self.cluster, dict(key))
            self._table = (key, splits, splits.topic_partitions())
        return self._table[1], self._table[2]


class Discovery:
    """Clients, partition counts and reachability of every cluster of every stream."""

    def __init__(
        self,
        config: CoordinatorConfig,
        executor: Executor,
        *,
        client_factory: MetadataClientFactory = KafkaMetadataClient,
        on_shrink: ShrinkListener | None = None,
    ) -> None:
        self._config = config
        self._executor = executor
        self._factory = client_factory
        self._on_shrink = on_shrink
        self._clients: dict[tuple[str, str], ClusterClient] = {}
        self._shared: dict[str, SharedClient] = {}
        self._tasks = BackgroundTasks("discovery")

    # -- clients -------------------------------------------------------------

    def client(self, stream: str, cluster: str) -> ClusterClient | None:
        return self._clients.get((stream, cluster))

    def clients(self, stream: str) -> list[ClusterClient]:
        return [c for (s, _), c in sorted(self._clients.items()) if s == stream]

    async def sync(self, view: StreamView | None, name: str) -> None:
        """Match the clients of stream ``name`` to its metadata: create clients
        for new clusters, recreate those whose connection changed, close the
        ones removed. Then discover partitions of the new and changed ones."""
        wanted = dict(view.spec.clusters) if view is not None else {}
        fresh: list[ClusterClient] = []
        for (stream, cid), cc in list(self._clients.items()):
            if stream != name:
                continue
            spec = wanted.get(cid)
            if spec is None or spec.connection(cid).fingerprint != cc.fingerprint:
                del self._clients[(stream, cid)]
                await self._release(cc)
            elif spec != cc.spec:
                cc.spec = spec  # same connection; topics or state changed
                fresh.append(cc)
        for cid, spec in wanted.items():
            if (name, cid) not in self._clients:
                shared = await self._acquire(spec.connection(cid))
                cc = self._clients[(name, cid)] = ClusterClient(name, cid, spec, shared)
                fresh.append(cc)
        self._name_users()
        await asyncio.gather(*(self.discover(cc) for cc in fresh))

    def _name_users(self) -> None:
        """Tell every client that can log it which (stream, cluster) pairs it
        serves, and whether its cluster is known to be down (FAILED for all
        of them: librdkafka's connection failures are then expected)."""
        users: dict[int, list[ClusterClient]] = {}
        for cc in self._clients.values():
            users.setdefault(id(cc.shared), []).append(cc)
        for shared in self._shared.values():
            mine = users.get(id(shared), [])
            if mine and isinstance(shared.client, ServesStreams):
                shared.client.set_log_context(
                    [(cc.stream, cc.cluster) for cc in mine],
                    expected_down=all(cc.spec.state is ClusterState.FAILED for cc in mine),
                )

    async def _acquire(self, connection: Connection) -> SharedClient:
        shared = self._shared.get(connection.fingerprint)
        if shared is None:
            try:
                client: MetadataClient = await self._run(self._factory, connection)
            except UnresolvedReferenceError as exc:  # settings this pod cannot resolve
                logger.warning("cluster settings unresolved: %s", exc)
                client = UnresolvedClient(str(exc))
            shared = self._shared[connection.fingerprint] = SharedClient(client)
        shared.users += 1
        return shared

    async def _release(self, cc: ClusterClient) -> None:
        cc.shared.users -= 1
        if cc.shared.users == 0:
            self._shared.pop(cc.fingerprint, None)
            await self._run(cc.shared.client.close)

    def client_count(self) -> int:
        """Distinct metadata clients open (one per physical connection)."""
        return len(self._shared)

    async def close(self) -> None:
        await self._tasks.stop()
        for shared in self._shared.values():
            await self._run(shared.client.close)
        self._shared.clear()
        self._clients.clear()

    # -- discovery -----------------------------------------------------------

    def start(self) -> None:
        self._tasks.every(
            "partition discovery", self._config.discovery_interval_s, self.discover_all
        )

    async def discover_all(self) -> None:
        """Refresh every cluster: one metadata request per physical cluster."""
        by_client: dict[int, list[ClusterClient]] = {}
        for cc in list(self._clients.values()):
            by_client.setdefault(id(cc.shared), []).append(cc)
        await asyncio.gather(*(self._discover_group(group) for group in by_client.values()))

    async def _discover_group(self, group: list[ClusterClient], *, force: bool = False) -> bool:
        """One partition-count request for clusters sharing a client; False
        if that cluster is unreachable."""
        topics = sorted({t for cc in group for t in cc.spec.topics})
        lead = group[0]
        try:
            counts = await self.call(
                lead,
                lambda: lead.client.partition_counts(topics, self._config.cluster_timeout_s),
                force=force,
            )
        except UnavailableError:
            return False
        for cc in group:
            self._update(cc, counts)
        return True

    async def discover(self, cc: ClusterClient, *, force: bool = False) -> bool:
        """Refresh the partition counts of ``cc``; False if it is unreachable."""
        return await self._discover_group([cc], force=force)

    def _update(self, cc: ClusterClient, counts: dict[str, int]) -> None:
        for topic in cc.spec.topics:
            n = counts.get(topic)
            if n is None:
                continue
            known = cc.partitions.get(topic, 0)
            if n < known:
                logger.error(
                    "partition count of a topic shrank; keeping the known partitions",
                    extra={
                        "stream": cc.stream,
                        "cluster": cc.cluster,
                        "topic": topic,
                        "known": known,
                        "seen": n,
                    },
                )
                if self._on_shrink is not None:
                    self._on_shrink(cc.stream, cc.cluster, topic, known, n)
                continue
            cc.partitions[topic] = n
        for topic in [t for t in cc.partitions if t not in cc.spec.topics]:
            del cc.partitions[topic]
        cc.discovered = True

    async def offsets(
        self, cc: ClusterClient, partitions: Sequence[tuple[str, int]], query: OffsetQuery
    ) -> dict[tuple[str, int], int]:
        """Offsets of ``partitions`` on ``cc`` (raises UnavailableError)."""
        return await self.call(
            cc, lambda: cc.client.offsets(partitions, query, self._config.cluster_timeout_s)
        )

    def require(self, stream: str, cluster: str) -> ClusterClient:
        """The cluster's client; :class:`UnavailableError` (retry) while it is
        not set up yet."""
        cc = self.client(stream, cluster)
        if cc is None:
            raise UnavailableError(
                f"stream {stream!r}: cluster {cluster!r} is not set up yet; retry"
            )
        return cc

    async def cluster_offsets(
        self, stream: str, cluster: str, splits: Sequence[SplitId], query: OffsetQuery
    ) -> dict[str, int]:
        """``{split id: offset}`` for ``splits`` of one cluster. Raises
        :class:`UnavailableError` when the cluster is not set up yet or does not
        answer; splits the cluster does not know are left out."""
        cc = self.require(stream, cluster)
        found = await self.offsets(cc, [(s.topic, s.partition) for s in splits], query)
        return {
            str(s): found[(s.topic, s.partition)] for s in splits if (s.topic, s.partition) in found
        }

    async def scan(
        self,
        stream: str,
        cluster: str,
        windows: Mapping[tuple[str, int], tuple[int, int]],
        visit: Visit,
        timeout_s: float,
    ) -> None:
        """Read records of one cluster (:meth:`MetadataClient.scan`).
        Raises :class:`UnavailableError` when the cluster is not set up yet
        or does not answer."""
        cc = self.require(stream, cluster)
        await self.call(cc, functools.partial(cc.client.scan, windows, visit, timeout_s))

    async def split_offsets(
        self, stream: str, splits: Iterable[SplitId], query: OffsetQuery
    ) -> dict[str, int]:
        """``{split id: offset}`` for ``splits`` of any clusters, each cluster
        asked concurrently. The splits of a cluster that is not set up or does
        not answer are left out (asked again next time)."""
        by_cluster: dict[str, list[SplitId]] = {}
        for s in splits:
            by_cluster.setdefault(s.cluster, []).append(s)

        async def one(cluster: str, items: list[SplitId]) -> dict[str, int]:
            try:
                return await self.cluster_offsets(stream, cluster, items, query)
            except UnavailableError as exc:
                logger.warning(
                    "cluster unreachable; its splits join later",
                    extra={"stream": stream, "cluster": cluster, "error": str(exc)},
                )
                return {}

        out: dict[str, int] = {}
        for part in await asyncio.gather(*(one(c, i) for c, i in by_cluster.items())):
            out.update(part)
        return out

    async def call(self, cc: ClusterClient, fn: Callable[[], T], *, force: bool = False) -> T:
        """Run a blocking client call, tracking the cluster's reachability."""
        health = cc.health
        now = time.monotonic()
        if not health.reachable and now < health.retry_at and not force:
            raise UnavailableError(f"cluster {cc.cluster} is unreachable: {health.error}")
        try:
            result = await self._run(fn)
        except UnavailableError as exc:
            if health.reachable:
                logger.warning(
                    "cluster unreachable",
                    extra={"stream": cc.stream, "cluster": cc.cluster, "error": str(exc)},
                )
                health.unreachable_since = now
            health.reachable = False
            health.error = str(exc)
            health.retry_at = time.monotonic() + self._config.unreachable_backoff_s
            raise
        if not health.reachable:
            logger.info(
                "cluster reachable again", extra={"stream": cc.stream, "cluster": cc.cluster}
            )
        cc.shared.health = Health()
        return result

    async def run(self, fn: Callable[[], T]) -> T:
        """Run a blocking client call that says nothing of the cluster's
        reachability (reading an internal topic, whose errors may be its own)."""
        return await self._run(fn)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)
