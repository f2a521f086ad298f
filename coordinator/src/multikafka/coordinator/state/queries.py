"""Progress of the queries reading through the coordinator
(``<prefix>/queries/<query id>``): the last committed offsets, and the
positions each query really read to on splits whose ranges were abandoned
(failover translation starts from those, never from further on).

The offsets are stored in their compact document form
(:func:`multikafka.core._offsets.to_document`), and a value above
:data:`COMPRESS_ABOVE` bytes is stored zlib-compressed: a query over 100,000
splits commits about 1 MB of JSON every batch, and etcd refuses requests
over 1.5 MiB. Values of earlier versions (flat offsets, plain JSON) are read.

A query also remembers, per cluster removed from its stream, where it left
that cluster's splits and when (:class:`RemovedCluster`, in the same value,
so a new leader finds it): a cluster added back within the stream's
``removed_cluster_retention`` resumes there (:mod:`multikafka.coordinator.planning.entry`).
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace

from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.coordinator.state.per_stream import ChangedStreams
from multikafka.core import _offsets as ov
from multikafka.core._background import BackgroundTasks
from multikafka.core._offsets import SplitOffsets
from multikafka.core.exceptions import ValidationError

logger = logging.getLogger(__name__)

#: A query that committed within this many seconds counts as running.
RUNNING_WITHIN_S = 3600.0
#: Progress values larger than this are stored zlib-compressed.
COMPRESS_ABOVE = 64 * 1024


@dataclass(frozen=True)
class RemovedCluster:
    """Where a query left a cluster that was removed from its stream."""

    #: When the query's planning retired the cluster's splits (ms since the epoch).
    removed_ms: int
    #: The first offset the query did not read, per split of the cluster.
    offsets: SplitOffsets

    def expired(self, now_ms: int, retention_ms: int) -> bool:
        """Whether the retention window has passed (0: at once)."""
        return now_ms - self.removed_ms >= retention_ms

    def to_document(self) -> dict[str, object]:
        return {"removed_ms": self.removed_ms, "offsets": ov.to_document(self.offsets)}

    @classmethod
    def from_document(cls, doc: Mapping[str, object], field: str) -> RemovedCluster:
        removed = doc.get("removed_ms", 0)
        if not isinstance(removed, int):
            raise ValidationError(f"{field}.removed_ms", "must be a number")
        return cls(removed, ov.parse(doc.get("offsets", {}), f"{field}.offsets"))


@dataclass
class QueryProgress:
    query_id: str
    stream: str
    offsets: SplitOffsets = field(default_factory=lambda: ov.EMPTY)
    updated_ms: int = 0
    #: split -> first offset this query did not read because its range was abandoned.
    abandoned: dict[str, int] = field(default_factory=dict)
    #: cluster -> where this query left it when it was removed from the stream.
    removed: dict[str, RemovedCluster] = field(default_factory=dict)
    #: The consumer group its commits go to (``commitGroupId``; "" for none):
    #: an ``mm2`` failover may translate with MM2's checkpoints of it.
    group_id: str = ""

    def to_json(self) -> bytes:
        doc: dict[str, object] = {
            "stream": self.stream,
            "offsets": ov.to_document(self.offsets),
            "updated_ms": self.updated_ms,
            "abandoned": self.abandoned,
        }
        if self.removed:
            doc["removed"] = {c: r.to_document() for c, r in sorted(self.removed.items())}
        if self.group_id:
            doc["group_id"] = self.group_id
        raw = json.dumps(doc, sort_keys=True).encode()
        return zlib.compress(raw, 1) if len(raw) > COMPRESS_ABOVE else raw

    @classmethod
    def from_json(cls, query_id: str, raw: bytes) -> QueryProgress:
        """Parse a stored value (compressed or not; flat or compact offsets)."""
        if raw[:1] != b"{":
            raw = zlib.decompress(raw)
        doc = json.loads(raw)
        return cls(
            query_id,
            str(doc["stream"]),
            ov.parse(doc.get("offsets", {})),
            int(doc.get("updated_ms", 0)),
            {str(k): int(v) for k, v in doc.get("abandoned", {}).items()},
            {
                str(c): RemovedCluster.from_document(r, f"removed.{c}")
                for c, r in doc.get("removed", {}).items()
            },
            str(doc.get("group_id", "")),
        )

    def resumable(self, retention_ms: int, now_ms: int) -> dict[str, SplitOffsets]:
        """cluster -> where this query left it, for removed clusters still
        within ``retention_ms``."""
        return {
            c: r.offsets for c, r in self.removed.items() if not r.expired(now_ms, retention_ms)
        }


class QueryStore:
    """Every query's progress, in memory and in etcd. Commits (one per
    micro-batch of every query) are written every ``flush_interval_s``, all
    changed queries in a few transactions; what failover translation and a
    removed cluster's resumption rely on (abandoned ranges, removed
    clusters) is written at once."""

    def __init__(self, etcd: EtcdClient, prefix: str, *, flush_interval_s: float = 1.0) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/queries/"
        self._queries: dict[str, QueryProgress] = {}
        self._flush_interval_s = flush_interval_s
        self._dirty = ChangedStreams(etcd, self._prefix, self._encode, "query progress")
        self._tasks = BackgroundTasks("query progress")

    def start(self) -> None:
        self._tasks.every("flush", self._flush_interval_s, self.flush)

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.flush()

    async def flush(self) -> None:
        """Write every query whose progress changed since it was last written."""
        await self._dirty.flush()

    def _encode(self, query_id: str) -> bytes | None:
        q = self._queries.get(query_id)
        return None if q is None else q.to_json()

    async def load(self) -> None:
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            qid = kv.key[len(self._prefix) :]
            try:
                self._queries[qid] = QueryProgress.from_json(qid, kv.value)
            except (*MALFORMED, zlib.error, ValidationError):
                logger.warning("unreadable query progress ignored", extra={"key": kv.key})

    def get(self, query_id: str) -> QueryProgress | None:
        return self._queries.get(query_id)

    def all(self) -> list[QueryProgress]:
        return [self._queries[q] for q in sorted(self._queries)]

    def of_stream(self, stream: str) -> list[QueryProgress]:
        return [q for q in self.all() if q.stream == stream]

    def running(self, stream: str, within_s: float = RUNNING_WITHIN_S) -> list[QueryProgress]:
        """Queries of ``stream`` that committed within ``within_s`` seconds."""
        horizon = (time.time() - within_s) * 1000
        return [q for q in self.of_stream(stream) if q.updated_ms >= horizon]

    async def commit(
        self,
        query_id: str,
        stream: str,
        end: Mapping[str, int],
        *,
        retention_ms: int | None = None,
        group_id: str = "",
    ) -> QueryProgress:
        """Take the query's committed ``end`` and the consumer group it goes
        to (and, given ``retention_ms``, forget removed clusters whose window
        has passed); written to etcd with the next :meth:`flush`."""
        q = self._queries.setdefault(query_id, QueryProgress(query_id, stream))
        q.stream = stream
        q.group_id = group_id
        q.offsets = ov.as_offsets(end)
        q.updated_ms = int(time.time() * 1000)
        # An abandoned position matters until the split left the vector.
        q.abandoned = {s: o for s, o in q.abandoned.items() if s in end}
        if retention_ms is not None:
            q.removed = {
                c: r for c, r in q.removed.items() if not r.expired(q.updated_ms, retention_ms)
            }
        self._dirty.add(query_id)
        return q

    async def remember_removed(
        self, query_id: str, stream: str, left: Mapping[str, int], now_ms: int
    ) -> None:
        """Remember where the query leaves the splits in ``left`` (their
        clusters were removed from the stream): the first offset it did not
        read, lowered to an abandoned position where a range was given up."""
        q = self._queries.setdefault(query_id, QueryProgress(query_id, stream))
        by_cluster: dict[str, dict[str, int]] = {}
        for s, o in left.items():
            by_cluster.setdefault(s.split("/", 1)[0], {})[s] = min(o, q.abandoned.get(s, o))
        changed = False
        for cid, offsets in by_cluster.items():
            before = q.removed.get(cid)
            known = before.offsets.to_dict() if before is not None else {}
            merged = {**known, **offsets}
            if before is not None and merged == known:
                continue  # planned again from the same start (a driver restart)
            q.removed[cid] = RemovedCluster(now_ms, ov.as_offsets(merged))
            changed = True
        if changed:
            await self._etcd.put(self._prefix + query_id, q.to_json())

    async def forget_held(self, query_id: str, start: SplitOffsets, present: Set[str]) -> None:
        """Forget where the query left the splits it holds again in
        ``start`` of the ``present`` clusters (back in the stream, resumed:
        Spark's offset log now has them). Memory of a split that enters
        again later for another reason (a failover, a topic added back)
        would otherwise send it to a stale offset."""
        q = self._queries.get(query_id)
        if q is None or not q.removed:
            return
        changed = False
        for cid in [c for c in q.removed if c in present]:
            r = q.removed[cid]
            if not any(s in start for s in r.offsets):
                continue
            left = {s: o for s, o in r.offsets.items() if s not in start}
            if left:
                q.removed[cid] = replace(r, offsets=ov.as_offsets(left))
            else:
                del q.removed[cid]
            changed = True
        if changed:
            await self._etcd.put(self._prefix + query_id, q.to_json())

    async def abandon(self, query_id: str, stream: str, split: str, from_offset: int) -> None:
        q = self._queries.setdefault(query_id, QueryProgress(query_id, stream))
        prev = q.abandoned.get(split)
        if prev is not None and prev <= from_offset:
            return
        q.abandoned[split] = from_offset
        # A range abandoned on a cluster already removed (an agent's report
        # may come after planning retired the splits) lowers where it resumes.
        gone = q.removed.get(split.split("/", 1)[0])
        if gone is not None and split in gone.offsets and gone.offsets[split] > from_offset:
            lowered = {**gone.offsets.to_dict(), split: from_offset}
            q.removed[split.split("/", 1)[0]] = replace(gone, offsets=ov.as_offsets(lowered))
        await self._etcd.put(self._prefix + query_id, q.to_json())
