"""Fakes for unit tests of the coordinator's logic (nothing running):

* :class:`FakeEtcd`: the surface of :class:`multikafka.coordinator.state.etcd.Etcd` in memory,
  with etcd's revision rules (one global revision; create and mod revisions
  per key), watches from a revision, conditional puts, leases, compaction and
  outages;
* :class:`FakeKafka`: clusters whose partitions, offsets, record times and
  reachability a test sets, behind the provider's ``MetadataClient``
  interface;
* :func:`coordinator_parts`: the leader's duties and the use cases of its
  term (:class:`LeaderDuties`, the production wiring) over those fakes,
  writing behind a fence as a leader does, with no background loop and no
  gRPC server (tests drive each step).

Integration tests use the real etcd and brokers instead.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from multikafka.coordinator import CoordinatorConfig
from multikafka.coordinator.agents.link import AgentLink
from multikafka.coordinator.agents.reconcile import Reconciler
from multikafka.coordinator.agents.registry import AgentRegistry
from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery, RawRecord, Visit
from multikafka.coordinator.clusters.lifecycle import ClusterLifecycle
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.operations.reports import LeaderReports
from multikafka.coordinator.operations.streams import StreamOperations
from multikafka.coordinator.planning.batches import MicroBatches
from multikafka.coordinator.planning.entry import EntryOffsets
from multikafka.coordinator.runtime.leader import LeaderDuties
from multikafka.coordinator.state.etcd import (
    KV,
    Compacted,
    Fence,
    FencedError,
    FencedEtcd,
    WatchEvent,
)
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.translation import Abandonments, FailoverTranslator, ReadMarks
from multikafka.core._fingerprint import Fingerprint, fingerprint
from multikafka.core.exceptions import ConflictError, UnavailableError
from multikafka.core.model import Connection

INTERNALS = (
    "multikafka.coordinator.agents.link",
    "multikafka.coordinator.agents.reconcile",
    "multikafka.coordinator.agents.registry",
    "multikafka.coordinator.clusters.discovery",
    "multikafka.coordinator.clusters.kafka",
    "multikafka.coordinator.clusters.lifecycle",
    "multikafka.coordinator.metrics",
    "multikafka.coordinator.operations.reports",
    "multikafka.coordinator.operations.streams",
    "multikafka.coordinator.planning.batches",
    "multikafka.coordinator.planning.entry",
    "multikafka.coordinator.runtime.leader",
    "multikafka.coordinator.state.etcd",
    "multikafka.coordinator.state.history",
    "multikafka.coordinator.state.metadata",
    "multikafka.coordinator.state.queries",
    "multikafka.coordinator.translation",
    "multikafka.core._fingerprint",
)


# -- etcd ---------------------------------------------------------------------


@dataclass
class _Lease:
    ttl_s: int
    keys: set[str] = field(default_factory=set)


class FakeEtcd:
    """An in-memory etcd. ``down = True`` makes every call fail like an
    unreachable etcd; ``hold_watches()`` delays watch events (a slow watch)."""

    endpoint = "fake-etcd"

    def __init__(self) -> None:
        self.revision = 1
        self._down = False
        self._kv: dict[str, KV] = {}
        self._events: list[WatchEvent] = []
        self._compacted = 0
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(1000)
        self._changed: asyncio.Event | None = None
        self._held = False
        self.puts = 0
        #: Calls refused because etcd was down.
        self.refused = 0

    # -- test controls --

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        self._notify()  # open watches notice at once

    def value(self, key: str) -> bytes | None:
        kv = self._kv.get(key)
        return kv.value if kv is not None else None

    def kv(self, key: str) -> KV | None:
        return self._kv.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self._kv if k.startswith(prefix))

    def compact(self, revision: int) -> None:
        self._compacted = revision

    def hold_watches(self) -> None:
        self._held = True

    def release_watches(self) -> None:
        self._held = False
        self._notify()

    def expire_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        for key in sorted(lease.keys if lease else ()):
            self._delete(key)

    # -- the Etcd surface --

    def _check(self) -> None:
        if self.down:
            self.refused += 1
            raise UnavailableError("etcd at fake-etcd: down")

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _write(
        self, key: str, value: bytes, lease: int | None = None, *, same: bool = False
    ) -> int:
        if not same:  # ``same``: another write of the same transaction
            self.revision += 1
        old = self._kv.get(key)
        create = old.create_revision if old is not None else self.revision
        self._kv[key] = KV(key, value, self.revision, create)
        if lease:
            self._leases[lease].keys.add(key)
        self._events.append(WatchEvent(key, value, self.revision))
        self.puts += 1
        self._notify()
        return self.revision

    def _delete(self, key: str) -> bool:
        if key not in self._kv:
            return False
        self.revision += 1
        del self._kv[key]
        for lease in self._leases.values():  # a deleted key leaves its lease, as in etcd
            lease.keys.discard(key)
        self._events.append(WatchEvent(key, None, self.revision))
        self._notify()
        return True

    async def connect(self) -> None:
        self._check()

    async def close(self) -> None:
        return None

    async def get(self, key: str) -> KV | None:
        self._check()
        return self._kv.get(key)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        self._check()
        return [self._kv[k] for k in self.keys(prefix)], self.revision

    async def get_range(self, start: str, end: str) -> tuple[list[KV], int]:
        self._check()
        return [self._kv[k] for k in sorted(self._kv) if start <= k < end], self.revision

    def _guard(self, fence: Fence | None) -> None:
        if fence is None:
            return
        kv = self._kv.get(fence.key)
        if kv is None or kv.create_revision != fence.revision:
            raise FencedError("not the leader any more: the write was refused (fenced)")

    async def put(
        self, key: str, value: bytes, *, lease: int | None = None, fence: Fence | None = None
    ) -> int:
        self._check()
        self._guard(fence)
        return self._write(key, value, lease)

    async def put_if(
        self, key: str, value: bytes, expected_mod_revision: int, *, fence: Fence | None = None
    ) -> int:
        return await self.put_all_if([(key, value, expected_mod_revision)], fence=fence)

    async def put_all_if(
        self, writes: Sequence[tuple[str, bytes, int]], *, fence: Fence | None = None
    ) -> int:
        self._check()
        self._guard(fence)
        for key, _, expected in writes:
            old = self._kv.get(key)
            if (old.mod_revision if old is not None else 0) != expected:
                raise ConflictError(f"{key} changed concurrently (expected version {expected})")
        for i, (key, value, _) in enumerate(writes):
            self._write(key, value, same=i > 0)
        return self.revision

    async def put_all(
        self, writes: Sequence[tuple[str, bytes]], *, fence: Fence | None = None
    ) -> int:
        self._check()
        self._guard(fence)
        for i, (key, value) in enumerate(writes):
            self._write(key, value, same=i > 0)
        return self.revision

    async def delete(self, key: str, *, fence: Fence | None = None) -> bool:
        self._check()
        self._guard(fence)
        return self._delete(key)

    async def delete_prefix(self, prefix: str, *, fence: Fence | None = None) -> int:
        self._check()
        self._guard(fence)
        keys = self.keys(prefix)
        for key in keys:
            self._delete(key)
        return len(keys)

    async def watch_range(
        self, start: str, end: str, start_revision: int
    ) -> AsyncIterator[list[WatchEvent]]:
        self._check()
        if start_revision <= self._compacted:
            raise Compacted(f"revision {start_revision} compacted (at {self._compacted})")
        if self._changed is None:
            self._changed = asyncio.Event()
        i = 0
        while True:
            self._check()
            if not self._held:
                batch: list[WatchEvent] = []
                while i < len(self._events):
                    ev = self._events[i]
                    i += 1
                    if ev.revision < start_revision or not start <= ev.key < end:
                        continue
                    if batch and batch[0].revision != ev.revision:
                        yield batch
                        batch = []
                    batch.append(ev)
                if batch:
                    yield batch
                    continue
            self._changed.clear()
            await self._changed.wait()

    async def grant_lease(self, ttl_s: int) -> int:
        self._check()
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _Lease(ttl_s)
        return lease_id

    async def refresh_lease(self, lease_id: int) -> int:
        self._check()
        lease = self._leases.get(lease_id)
        return lease.ttl_s if lease is not None else 0

    async def revoke_lease(self, lease_id: int) -> None:
        self._check()
        self.expire_lease(lease_id)

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int
    ) -> tuple[bool, KV | None]:
        self._check()
        if key in self._kv:
            return False, self._kv[key]
        self._write(key, value, lease_id)
        return True, self._kv[key]

    async def version(self) -> str:
        self._check()
        return "fake"


class BlockingRenewals:
    """A :class:`FakeEtcd` as a lease keeper's blocking client
    (:class:`~multikafka.coordinator.state.leases.LeaseRenewals`): each call
    runs the fake's own on an event loop of the caller's thread."""

    def __init__(self, etcd: FakeEtcd) -> None:
        self.etcd = etcd

    def keep_alive(self, lease_id: int, timeout_s: float) -> int:
        return asyncio.run(self.etcd.refresh_lease(lease_id))

    def create_revision(self, key: str, timeout_s: float) -> int | None:
        kv = asyncio.run(self.etcd.get(key))
        return None if kv is None else kv.create_revision

    def close(self) -> None:
        return None


# -- Kafka ----------------------------------------------------------------------


@dataclass
class FakeCluster:
    """One Kafka cluster: topics and their partitions, the end offset and
    record times per partition, and whether it answers."""

    counts: dict[str, int] = field(default_factory=dict)
    #: (topic, partition) -> end offset (default 0)
    latest: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, partition) -> log start offset (default 0)
    earliest: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, partition) -> last stable offset, where a transaction is open
    #: (default: the end offset)
    stable: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, partition) -> record time (ms) of each offset, in offset order
    times: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    #: (topic, partition) -> key and value of each offset, where a test gave
    #: them (default: no key, the value ``b"<offset>"``)
    contents: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = field(
        default_factory=dict
    )
    down: bool = False
    calls: int = 0
    clients: int = 0
    commits: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    #: Internal topics' records (MM2's offset syncs): topic -> partition -> records
    internal: dict[str, dict[int, list[RawRecord]]] = field(default_factory=dict)

    def append_internal(
        self, topic: str, key: bytes, value: bytes, *, partition: int = 0, timestamp_ms: int = 0
    ) -> None:
        """Append a record to an internal topic (created on first use)."""
        records = self.internal.setdefault(topic, {}).setdefault(partition, [])
        records.append(RawRecord(partition, len(records), key, value, timestamp_ms))

    def add_records(
        self,
        topic: str,
        partition: int,
        times_ms: Sequence[int],
        contents: Sequence[tuple[bytes | None, bytes | None]] | None = None,
    ) -> None:
        """Append records with these record times (and keys and values) to a partition."""
        tp = (topic, partition)
        start = self.earliest.get(tp, 0) + len(self.times.get(tp, []))
        self.times.setdefault(tp, []).extend(times_ms)
        self.contents.setdefault(tp, []).extend(
            contents
            if contents is not None
            else [(None, b"%d" % (start + i)) for i in range(len(times_ms))]
        )
        self.latest[tp] = self.earliest.get(tp, 0) + len(self.times[tp])
        self.counts[topic] = max(self.counts.get(topic, 0), partition + 1)

    def record(self, topic: str, partition: int, offset: int) -> FakeRecord:
        """The record at ``offset``."""
        tp = (topic, partition)
        i = offset - self.earliest.get(tp, 0)
        key, value = self.contents[tp][i]
        return FakeRecord(offset, self.times[tp][i], key, value)


@dataclass(frozen=True)
class FakeRecord:
    """A record as :meth:`FakeMetadataClient.scan` hands it over."""

    _offset: int
    _timestamp: int
    _key: bytes | None
    _value: bytes | None

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def fingerprint(self) -> Fingerprint:
        return fingerprint(self._key, self._value, self._timestamp)


class FakeMetadataClient:
    """The provider's ``MetadataClient`` over a :class:`FakeCluster`."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        cluster.clients += 1
        self.closed = False
        #: Records :meth:`scan` handed over.
        self.scanned = 0
        #: (reader, internal topic, partition) -> next offset :meth:`read_records` reads
        self.read_at: dict[tuple[str, str, int], int] = {}

    def _ask(self) -> None:
        self.cluster.calls += 1
        if self.cluster.down:
            raise UnavailableError("cluster down")

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        self._ask()
        return {t: n for t, n in self.cluster.counts.items() if t in topics}

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        self._ask()
        c = self.cluster
        out = {}
        for tp in partitions:
            if tp[1] >= c.counts.get(tp[0], 0):
                continue  # unknown partition: absent from the answer
            start, end = c.earliest.get(tp, 0), c.latest.get(tp, 0)
            if query.kind == "earliest":
                out[tp] = start
            elif query.kind == "latest":
                out[tp] = end
            elif query.kind == "stable":
                out[tp] = min(c.stable.get(tp, end), end)
            else:
                times = c.times.get(tp, [])
                found = [i for i, ts in enumerate(times) if ts >= query.timestamp_ms]
                out[tp] = start + found[0] if found else end
        return out

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        self._ask()
        self.cluster.commits.setdefault(group_id, {}).update(offsets)

    def read_records(
        self,
        reader: str,
        topic: str,
        positions: Mapping[int, int],
        max_records: int,
        timeout_s: float,
    ) -> list[RawRecord] | None:
        self._ask()
        parts = self.cluster.internal.get(topic)
        if parts is None:
            return None
        out: list[RawRecord] = []
        for p, records in sorted(parts.items()):
            at = self.read_at.setdefault((reader, topic, p), positions.get(p, 0))
            taken = records[at : at + max_records - len(out)]
            out += taken
            self.read_at[(reader, topic, p)] = at + len(taken)
        return out

    def close_reader(self, reader: str) -> None:
        for key in [k for k in self.read_at if k[0] == reader]:
            del self.read_at[key]

    def scan(
        self,
        windows: Mapping[tuple[str, int], tuple[int, int]],
        visit: Visit,
        timeout_s: float,
    ) -> None:
        self._ask()
        c = self.cluster
        for (topic, partition), (start, end) in windows.items():
            first = max(start, c.earliest.get((topic, partition), 0))
            for offset in range(first, min(end, c.latest.get((topic, partition), 0))):
                self.scanned += 1
                if not visit((topic, partition), c.record(topic, partition, offset)):
                    break

    def close(self) -> None:
        self.closed = True


class FakeKafka:
    """Clusters by bootstrap address; :meth:`factory` is a ``MetadataClientFactory``."""

    def __init__(self) -> None:
        self.clusters: dict[str, FakeCluster] = {}
        self.clients: list[FakeMetadataClient] = []

    def cluster(self, bootstrap: str) -> FakeCluster:
        return self.clusters.setdefault(bootstrap, FakeCluster())

    def factory(self, connection: Connection) -> FakeMetadataClient:
        client = FakeMetadataClient(self.cluster(connection.bootstrap_servers))
        self.clients.append(client)
        return client


# -- the coordinator's parts ------------------------------------------------


#: Backoffs short enough for tests; loops never run on their own in these tests.
#: Translations do not wait for marks (tests of the wait make a translator of
#: their own).
FAKE_CONFIG = CoordinatorConfig(
    unreachable_backoff_s=0.0,
    cluster_timeout_s=0.1,
    reader_ttl_s=60.0,
    kafka_threads=2,
    translation_wait_s=0.0,
)


@dataclass
class Parts:
    """The store every replica has, and the leader's duties (as
    :class:`multikafka.coordinator.Coordinator` wires them) over fakes."""

    etcd: FakeEtcd
    kafka: FakeKafka
    store: MetadataStore
    duties: LeaderDuties
    #: The fence the duties write behind (this "replica" leads).
    fence: Fence
    #: Times a write was refused by the fence.
    fenced: list[int]
    executor: ThreadPoolExecutor

    @property
    def metrics(self) -> Metrics:
        return self.duties.metrics

    @property
    def history(self) -> History:
        return self.duties.history

    @property
    def queries(self) -> QueryStore:
        return self.duties.queries

    @property
    def marks(self) -> ReadMarks:
        return self.duties.marks

    @property
    def registry(self) -> AgentRegistry:
        return self.duties.registry

    @property
    def discovery(self) -> Discovery:
        return self.duties.discovery

    @property
    def lifecycle(self) -> ClusterLifecycle:
        return self.duties.lifecycle

    @property
    def reconciler(self) -> Reconciler:
        return self.duties.reconciler

    @property
    def abandonments(self) -> Abandonments:
        return self.duties.abandonments

    @property
    def entry(self) -> EntryOffsets:
        return self.duties.entry

    @property
    def translator(self) -> FailoverTranslator:
        return self.duties.translator

    # -- the term's use cases (what the gRPC services call) --

    @property
    def batches(self) -> MicroBatches:
        return self.duties.batches

    @property
    def link(self) -> AgentLink:
        return self.duties.link

    @property
    def operations(self) -> StreamOperations:
        return self.duties.operations

    @property
    def reports(self) -> LeaderReports:
        return self.duties.reports

    def kinds(self, stream: str = "s") -> list[str]:
        """History kinds of ``stream`` other than the reconciler's own entries."""
        return [e.kind for e in self.history.entries(stream) if e.kind != "reconcile"]

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of a metric's sample with these labels (None: none yet)."""
        return self.metrics.registry.get_sample_value(name, labels)

    async def put(self, doc: Mapping[str, Any]) -> int:
        """Write a stream document to etcd (as an operator would) and wait
        until the coordinator applied it; returns its revision."""
        from multikafka.core.validation import parse_stream

        spec = parse_stream(doc)
        revision = await self.store.put_stream(spec)
        await self.store.wait_applied(revision)
        return revision

    async def settle(self) -> None:
        """Run the lifecycle check the watch asked for (its loop would), and
        apply what it wrote."""
        while self.lifecycle.woken:
            self.lifecycle._wake.clear()
            await self.lifecycle.check_all()
        await self.store.wait_applied(self.etcd.revision)

    async def close(self) -> None:
        await self.duties.stop()
        await self.store.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)


async def coordinator_parts(
    etcd: FakeEtcd | None = None,
    kafka: FakeKafka | None = None,
    config: CoordinatorConfig = FAKE_CONFIG,
    prefix: str = "/t",
) -> Parts:
    """The store (its watch runs: changes apply as in production) and the
    leader's duties, loaded but with none of their loops running."""
    etcd = etcd or FakeEtcd()
    kafka = kafka or FakeKafka()
    executor = ThreadPoolExecutor(config.kafka_threads)
    key = f"{prefix}/leader"
    fence = Fence(key, await etcd.put(key, b"this test"))
    fenced: list[int] = []
    writer = FencedEtcd(etcd, lambda: fence, lambda: fenced.append(1))  # type: ignore[arg-type]
    store = MetadataStore(writer, prefix, retry_s=0.01)
    duties = LeaderDuties(
        replace(config, etcd_prefix=prefix), store, writer, Metrics(), executor, kafka.factory
    )
    await store.start()
    await duties.load()
    return Parts(etcd, kafka, store, duties, fence, fenced, executor)
