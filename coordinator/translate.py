"""Where a split starts when a query first sees it.

Usually that is the cluster's starting position (earliest unless the stream
document says otherwise), so nothing added mid-query is missed. When the split
belongs to a cluster that replaced a failed one (a failover record names it as
the target) and the query still holds the failed cluster's splits, the offset
is *translated* from the query's position on the failed cluster:

* ``timestamp``: ``offsets_for_times(time of the last record read - margin)``
  on the new cluster; at-least-once with duplicates bounded by the margin.
* ``identity``: the same offset (offset-preserving mirrors).

The position used is what the query really read: ranges abandoned on the failed
cluster are taken out (see :class:`coordinator.queries.QueryStore`), and only
marks of records actually read exist. Without a mark, the split starts at its
earliest offset: more duplicates, never a loss.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coordinator.discovery import Discovery
from coordinator.marks import ReadMarks
from coordinator.stream_state import FailoverRecord, StreamView
from multikafka.exceptions import UnavailableError
from multikafka.model import ClusterState, FailoverStrategy, SplitId, StartingPosition, StartKind
from multikafka.offsets import clusters_of
from multikafka.providers import OffsetQuery

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Translation:
    """How one new split's starting offset was chosen (for the history)."""

    split: str
    source: str
    offset: int
    how: str


def _query_for(position: StartingPosition | None) -> OffsetQuery:
    if position is None or position.kind is StartKind.EARLIEST:
        return OffsetQuery.earliest()
    if position.kind is StartKind.LATEST:
        return OffsetQuery.latest()
    return OffsetQuery.at_time(position.timestamp_ms)


class EntryResolver:
    def __init__(self, discovery: Discovery, marks: ReadMarks) -> None:
        self._discovery = discovery
        self._marks = marks

    async def resolve(
        self,
        view: StreamView,
        start: Mapping[str, int],
        new: Sequence[str],
        abandoned: Mapping[str, int],
    ) -> tuple[dict[str, int], list[Translation]]:
        """Starting offsets of the ``new`` splits that can be resolved now
        (splits of unreachable clusters are left out and tried again later)."""
        by_cluster: dict[str, list[SplitId]] = defaultdict(list)
        for s in new:
            split = SplitId.parse(s)
            by_cluster[split.cluster].append(split)
        results = await asyncio.gather(
            *(
                self._cluster(view, cid, splits, start, abandoned)
                for cid, splits in by_cluster.items()
            )
        )
        entry: dict[str, int] = {}
        translations: list[Translation] = []
        for offsets, notes in results:
            entry.update(offsets)
            translations.extend(notes)
        return entry, translations

    async def _cluster(
        self,
        view: StreamView,
        cluster: str,
        splits: list[SplitId],
        start: Mapping[str, int],
        abandoned: Mapping[str, int],
    ) -> tuple[dict[str, int], list[Translation]]:
        cc = self._discovery.client(view.name, cluster)
        if cc is None:
            return {}, []
        record = view.status.failover_into(cluster)
        if record is not None and self._applies(view, record, start):
            return await self._translate(view, record, splits, start, abandoned)
        query = _query_for(view.spec.clusters[cluster].starting)
        try:
            found = await self._discovery.offsets(
                cc, [(s.topic, s.partition) for s in splits], query
            )
        except UnavailableError:
            return {}, []
        return {
            str(s): found[(s.topic, s.partition)] for s in splits if (s.topic, s.partition) in found
        }, []

    @staticmethod
    def _applies(view: StreamView, record: FailoverRecord, start: Mapping[str, int]) -> bool:
        """A failover decides where its target starts only while the failed
        cluster is still FAILED and the query still holds its splits."""
        source = view.spec.clusters.get(record.from_cluster)
        if source is None or source.state is not ClusterState.FAILED:
            return False
        return record.from_cluster in clusters_of(start)

    async def _translate(
        self,
        view: StreamView,
        record: FailoverRecord,
        splits: list[SplitId],
        start: Mapping[str, int],
        abandoned: Mapping[str, int],
    ) -> tuple[dict[str, int], list[Translation]]:
        cc = self._discovery.client(view.name, splits[0].cluster)
        if cc is None:
            return {}, []
        exact: dict[str, tuple[int, str, str]] = {}  # split -> (offset, source, how)
        by_time: dict[int, list[tuple[SplitId, str, str]]] = defaultdict(list)
        earliest: list[tuple[SplitId, str, str]] = []
        for b in splits:
            a = str(SplitId(record.from_cluster, b.topic, b.partition))
            if a not in start:
                earliest.append((b, "", "no counterpart on the failed cluster: earliest"))
                continue
            pos = min(start[a], abandoned.get(a, start[a]))
            if record.strategy is FailoverStrategy.IDENTITY:
                exact[str(b)] = (pos, a, f"identity from {a}@{pos}")
                continue
            mark = self._marks.at_or_before(view.name, a, pos - 1) if pos > 0 else None
            if mark is None:
                why = "nothing read yet" if pos == 0 else "no read mark"
                earliest.append((b, a, f"{why} on {a}@{pos}: earliest"))
                continue
            ts = max(mark[1] - record.margin_ms, 0)
            by_time[ts].append(
                (b, a, f"time of {a}@{mark[0]} ({mark[1]} ms) - {record.margin_ms} ms margin")
            )
        lookups = [(OffsetQuery.earliest(), earliest)] + [
            (OffsetQuery.at_time(ts), items) for ts, items in by_time.items()
        ]
        try:
            answers = await asyncio.gather(
                *(
                    self._discovery.offsets(cc, [(b.topic, b.partition) for b, _, _ in items], q)
                    for q, items in lookups
                    if items
                )
            )
        except UnavailableError:
            return {}, []
        for (_, items), found in zip([lk for lk in lookups if lk[1]], answers, strict=True):
            for b, a, how in items:
                if (b.topic, b.partition) in found:
                    exact[str(b)] = (found[(b.topic, b.partition)], a, how)
        entry = {s: off for s, (off, _, _) in exact.items()}
        notes = [Translation(s, a, off, how) for s, (off, a, how) in sorted(exact.items())]
        return entry, notes
