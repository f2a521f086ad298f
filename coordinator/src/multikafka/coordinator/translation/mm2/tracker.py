"""The offset syncs of every MM2 mirror of every stream, kept by the leader
while the cluster holding them can be read (:class:`MirrorSyncs`).

MM2 writes its offset syncs to the *source* cluster by default: once that
cluster is dead, nobody can read them. So the leader tails each mirror's
offset-syncs topic all the time (every ``poll_interval_s``, 0.2 s: a sync
MM2 wrote just before the source died is lost to a failover if it was not
read by then, and costs re-reading up to that much more), keeps the syncs
translation needs per source partition (:class:`~.syncs.SyncStore`, bounded)
and writes a compact summary to ``<prefix>/mm2-syncs/<stream>`` every
``flush_interval_s``: the kept syncs, the newest sync's time per partition,
and how far the topic was read. A new leader loads it and goes on reading
from there, so a takeover after the source died still translates.

It also tails each mirror's checkpoints topic (on the mirror), keeping the
newest checkpoint per consumer group and partition of the mirror's topics: a
query that commits its positions to a group (``commitGroupId``) can start
from MM2's checkpoint of that group where no sync is usable. Checkpoints are
not summarised: the mirror, where they live, is the cluster that is alive.

Only syncs and checkpoints of the stream's topics are kept (MM2 writes them
for every topic it replicates).

Per mirrored partition it also sets two gauges: the age of the newest sync
(``multikafka_mm2_sync_age_seconds``) and how many records the source holds
past it (``multikafka_mm2_upstream_lag_records``). MM2 writes a sync about
every ``offset.lag.max`` records (default 100): a lag that keeps growing
while the age grows means MM2 stopped, and a failover then re-reads more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery, RawRecord
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.per_stream import ChangedStreams
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.coordinator.translation.mm2.syncs import SyncStore
from multikafka.core._background import BackgroundTasks
from multikafka.core.exceptions import UnavailableError
from multikafka.core.mm2 import Mm2Mirror, ReplicationPolicy, SyncsLocation
from multikafka.core.mm2_records import Checkpoint, OffsetSync
from multikafka.core.model import ClusterState, SplitId

logger = logging.getLogger(__name__)

#: What the leader tails per mirror (each a reader of the metadata client,
#: named by :func:`_reader`): MM2's offset syncs and its checkpoints.
SYNCS, CHECKPOINTS = "offset syncs", "checkpoints"
#: Records read from one offset-syncs topic per poll.
MAX_RECORDS_PER_POLL = 50_000
#: Syncs per partition in the summary in etcd: the newest ones kept (at
#: growing distances behind the newest sync: with a sync every 100 records
#: they reach about 25,000 records back) and the earliest. A store keeps up
#: to :data:`~.syncs.MAX_SYNCS`; 1,000 mirrored partitions stay well inside
#: etcd's request limit this way.
SUMMARY_SYNCS = 16


class SyncHit(NamedTuple):
    """A translated position and the sync it came from."""

    offset: int
    sync: OffsetSync


@dataclass
class _Mirror:
    """One mirror cluster of a stream and what was read of its syncs."""

    spec: Mm2Mirror
    store: SyncStore = field(default_factory=SyncStore)
    #: Partition of the offset-syncs topic -> next offset to read.
    positions: dict[int, int] = field(default_factory=dict)
    #: (source topic, partition) -> record time (ms) of its newest sync.
    newest_ms: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Records of the topic that are not offset syncs (counted, skipped).
    unreadable: int = 0
    #: (group, remote topic, partition) -> MM2's newest checkpoint of it.
    checkpoints: dict[tuple[str, str, int], Checkpoint] = field(default_factory=dict)

    def to_document(self) -> dict[str, Any]:
        return {
            "mm2": self.spec.to_document(),
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "syncs": {
                f"{t}/{p}": [
                    [s.upstream_offset, s.downstream_offset]
                    for s in _summary(self.store.kept(t, p))
                ]
                for t, p in self.store.partitions()
            },
            "newest_ms": {f"{t}/{p}": ms for (t, p), ms in sorted(self.newest_ms.items())},
        }


def _summary(kept: tuple[OffsetSync, ...]) -> tuple[OffsetSync, ...]:
    """The syncs of a partition written to etcd (newest first)."""
    return kept if len(kept) <= SUMMARY_SYNCS + 1 else (*kept[:SUMMARY_SYNCS], kept[-1])


def _reader(stream: str, mirror: str, kind: str) -> str:
    """The metadata client's reader that tails ``kind`` for ``mirror``."""
    return f"{stream}/{mirror}/{kind}"


def _topic_partition(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


class MirrorSyncs:
    def __init__(
        self,
        etcd: EtcdClient,
        prefix: str,
        store: MetadataStore,
        discovery: Discovery,
        metrics: Metrics,
        *,
        poll_interval_s: float = 0.2,
        gauge_interval_s: float = 5.0,
        flush_interval_s: float = 5.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/mm2-syncs/"
        self._store = store
        self._discovery = discovery
        self._metrics = metrics
        self._poll_interval_s = poll_interval_s
        self._gauge_interval_s = gauge_interval_s
        self._gauged_at = 0.0
        self._flush_interval_s = flush_interval_s
        self._timeout_s = timeout_s
        #: stream -> mirror cluster -> what was read of its syncs
        self._mirrors: dict[str, dict[str, _Mirror]] = {}
        #: (stream, mirror cluster) -> the partitions whose gauges are set
        self._gauged: dict[tuple[str, str], set[tuple[str, int]]] = {}
        self._dirty = ChangedStreams(etcd, self._prefix, self._encode, "MM2 offset syncs")
        self._tasks = BackgroundTasks("MM2 offset syncs")

    # -- the term -----------------------------------------------------------------

    async def load(self) -> None:
        """Take the summaries an earlier leader wrote."""
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            stream = kv.key[len(self._prefix) :]
            try:
                doc = json.loads(kv.value)
                self._mirrors[stream] = {cid: self._decode(m) for cid, m in doc.items()}
            except MALFORMED:
                logger.warning("unreadable MM2 offset syncs ignored", extra={"key": kv.key})

    @staticmethod
    def _decode(doc: Mapping[str, Any]) -> _Mirror:
        spec = doc["mm2"]
        mirror = _Mirror(
            Mm2Mirror(
                str(spec["source"]),
                str(spec["source_alias"]),
                str(spec["target_alias"]),
                ReplicationPolicy(spec["replication_policy"]),
                SyncsLocation(spec["offset_syncs_topic_location"]),
            )
        )
        mirror.positions = {int(p): int(o) for p, o in doc.get("positions", {}).items()}
        for key, pairs in doc.get("syncs", {}).items():
            topic, partition = _topic_partition(key)
            mirror.store.restore([OffsetSync(topic, partition, int(u), int(d)) for u, d in pairs])
        mirror.newest_ms = {
            _topic_partition(k): int(ms) for k, ms in doc.get("newest_ms", {}).items()
        }
        return mirror

    def start(self) -> None:
        self._tasks.every("tail", self._poll_interval_s, self.poll)
        self._tasks.every("persist", self._flush_interval_s, self.flush)

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.flush()

    async def flush(self) -> None:
        await self._dirty.flush()

    def _encode(self, stream: str) -> bytes | None:
        mirrors = self._mirrors.get(stream)
        if not mirrors:
            return None
        return json.dumps(
            {cid: m.to_document() for cid, m in sorted(mirrors.items())}, separators=(",", ":")
        ).encode()

    # -- reading the syncs ----------------------------------------------------------

    async def poll(self) -> None:
        """One round: match the mirrors to the documents, read each one's new
        syncs, set the gauges."""
        views = {v.name: v for v in self._store.views()}
        for stream in [s for s in self._mirrors if s not in views]:
            self._drop(stream, list(self._mirrors[stream]))
        for view in views.values():
            self._match(view)
        mirrors = [
            (view, cid, mirror)
            for view in views.values()
            for cid, mirror in self._mirrors.get(view.name, {}).items()
        ]
        # Each mirror on its own: one whose cluster stopped answering does not
        # hold up the others' syncs.
        await asyncio.gather(*(self._read(*m) for m in mirrors))
        now = time.monotonic()
        if now - self._gauged_at >= self._gauge_interval_s:
            self._gauged_at = now
            await asyncio.gather(*(self._gauge(*m) for m in mirrors))

    def _match(self, view: StreamView) -> None:
        wanted = {cid: c.mm2 for cid, c in view.spec.clusters.items() if c.mm2 is not None}
        self._drop(
            view.name, [cid for cid in self._mirrors.get(view.name, {}) if cid not in wanted]
        )
        mirrors = self._mirrors.setdefault(view.name, {})
        for cid, spec in wanted.items():
            known = mirrors.get(cid)
            if known is None or known.spec != spec:
                # New, or another replication (source, aliases, location): other syncs.
                if known is not None:
                    self._close_readers(view.name, cid)
                mirrors[cid] = _Mirror(spec)
                self._dirty.add(view.name)
        if not mirrors:
            del self._mirrors[view.name]

    def _drop(self, stream: str, clusters: list[str]) -> None:
        mirrors = self._mirrors.get(stream, {})
        for cid in clusters:
            mirrors.pop(cid, None)
            self._close_readers(stream, cid)
            self._forget_gauges(stream, cid, set())
            self._dirty.add(stream)
        if not mirrors:
            self._mirrors.pop(stream, None)

    def _close_readers(self, stream: str, cid: str) -> None:
        for cc in self._discovery.clients(stream):
            for kind in (SYNCS, CHECKPOINTS):
                cc.client.close_reader(_reader(stream, cid, kind))

    async def _tail(
        self,
        view: StreamView,
        cid: str,
        holder: str,
        kind: str,
        topic: str,
        positions: dict[int, int],
    ) -> list[RawRecord]:
        """The new records of ``topic`` on cluster ``holder`` (none while it is
        FAILED, unreachable, or the topic does not exist)."""
        spec = view.spec.clusters.get(holder)
        cc = self._discovery.client(view.name, holder)
        reader = _reader(view.name, cid, kind)
        if spec is None or spec.state is ClusterState.FAILED:
            if cc is not None:  # dead: keep what was read, stop reconnecting to it
                cc.client.close_reader(reader)
            return []
        if cc is None or not cc.health.reachable:
            return []
        try:
            records = await self._discovery.run(
                lambda: cc.client.read_records(
                    reader, topic, positions, MAX_RECORDS_PER_POLL, self._timeout_s
                )
            )
        except UnavailableError as exc:
            logger.warning(
                f"cannot read MM2 {kind}",
                extra={"stream": view.name, "cluster": cid, "topic": topic, "error": str(exc)},
            )
            return []
        return records or []

    async def _read(self, view: StreamView, cid: str, mirror: _Mirror) -> None:
        source = view.spec.clusters.get(mirror.spec.source)
        if source is None:
            return
        topics = set(source.topics)
        records = await self._tail(
            view,
            cid,
            mirror.spec.syncs_cluster(cid),
            SYNCS,
            mirror.spec.offset_syncs_topic,
            dict(mirror.positions),
        )
        for r in records:
            mirror.positions[r.partition] = r.offset + 1
            try:
                sync = OffsetSync.decode(r.key or b"", r.value or b"")
            except ValueError as exc:
                mirror.unreadable += 1
                if mirror.unreadable == 1:
                    logger.warning(
                        "a record of an offset-syncs topic is no MM2 offset sync; skipped",
                        extra={
                            "stream": view.name,
                            "cluster": cid,
                            "topic": mirror.spec.offset_syncs_topic,
                            "error": str(exc),
                        },
                    )
                continue
            if sync.topic in topics:
                mirror.store.add(sync)
                mirror.newest_ms[(sync.topic, sync.partition)] = r.timestamp_ms
        if records:
            self._dirty.add(view.name)
        remote = set(view.spec.clusters[cid].topics)
        for r in await self._tail(view, cid, cid, CHECKPOINTS, mirror.spec.checkpoints_topic, {}):
            try:
                cp = Checkpoint.decode(r.key or b"", r.value or b"")
            except ValueError:
                continue  # another version, or no checkpoint: MM2 skips those too
            if cp.topic in remote:
                mirror.checkpoints[(cp.consumer_group, cp.topic, cp.partition)] = cp

    async def _gauge(self, view: StreamView, cid: str, mirror: _Mirror) -> None:
        """Sync age and upstream lag of each partition of the source's topics."""
        source = view.spec.clusters.get(mirror.spec.source)
        if source is None:
            return
        cc = self._discovery.client(view.name, mirror.spec.source)
        splits = cc.splits() if cc is not None else []
        ends: dict[str, int] = {}
        if (
            splits
            and source.state is not ClusterState.FAILED
            and cc is not None
            and cc.health.reachable
        ):
            try:
                ends = await self._discovery.cluster_offsets(
                    view.name, mirror.spec.source, splits, OffsetQuery.latest()
                )
            except UnavailableError:
                ends = {}
        now_ms = time.time() * 1000
        seen: set[tuple[str, int]] = set()
        for s in splits:
            tp = (s.topic, s.partition)
            seen.add(tp)
            labels = (view.name, cid, s.topic, str(s.partition))
            newest = mirror.store.kept(*tp)
            if tp in mirror.newest_ms:
                age = max(now_ms - mirror.newest_ms[tp], 0.0) / 1000
                self._metrics.mm2_sync_age.labels(*labels).set(age)
            end = ends.get(str(s))
            if end is not None:
                # Records after the newest synced one (all of them without a sync).
                behind = end - (newest[0].upstream_offset + 1 if newest else 0)
                self._metrics.mm2_upstream_lag.labels(*labels).set(max(behind, 0))
        self._forget_gauges(view.name, cid, seen)

    def _forget_gauges(self, stream: str, cid: str, keep: set[tuple[str, int]]) -> None:
        had = self._gauged.get((stream, cid), set())
        for topic, partition in had - keep:
            self._metrics.forget_mm2_partition(stream, cid, topic, partition)
        if keep:
            self._gauged[(stream, cid)] = keep
        else:
            self._gauged.pop((stream, cid), None)

    # -- translation -------------------------------------------------------------------

    def translate(self, stream: str, mirror: str, source: SplitId, position: int) -> SyncHit | None:
        """Where ``mirror``'s copy of ``source`` starts for a query at
        ``position`` there (MM2's rule, :meth:`SyncStore.translate`); None
        without a usable sync."""
        m = self._mirrors.get(stream, {}).get(mirror)
        if m is None or m.spec.source != source.cluster:
            return None
        found = m.store.translate_with(source.topic, source.partition, position)
        return None if found is None else SyncHit(*found)

    def checkpoint(
        self, stream: str, mirror: str, group: str, topic: str, partition: int
    ) -> Checkpoint | None:
        """MM2's newest checkpoint of consumer group ``group`` for partition
        ``partition`` of ``mirror``'s topic ``topic``."""
        m = self._mirrors.get(stream, {}).get(mirror)
        return None if m is None else m.checkpoints.get((group, topic, partition))

    def coverage(self, view: StreamView, mirror: str) -> str:
        """One line on what a failover into ``mirror`` can translate with,
        for its failover record."""
        m = self._mirrors.get(view.name, {}).get(mirror)
        cc = self._discovery.client(view.name, m.spec.source) if m is not None else None
        partitions = sorted((s.topic, s.partition) for s in cc.splits()) if cc is not None else []
        if m is None or not partitions:
            return "no MM2 offset syncs known: every split falls back to timestamp"
        without = [f"{t}/{p}" for t, p in partitions if not m.store.kept(t, p)]
        newest = max((m.newest_ms.get(tp, 0) for tp in partitions), default=0)
        age = f"; newest {max(time.time() * 1000 - newest, 0) / 1000:.1f} s old" if newest else ""
        line = f"MM2 offset syncs known for {len(partitions) - len(without)} of {len(partitions)} partitions{age}"
        if without:
            shown = ", ".join(without[:5]) + (
                f" and {len(without) - 5} more" if len(without) > 5 else ""
            )
            line += f"; none for {shown}: those fall back to timestamp"
        return line
