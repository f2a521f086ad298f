"""Failover translation: where the splits of a cluster that replaced a failed
one start, for a query that was reading the failed cluster.

* ``timestamp``: ``offsets_for_times(time of the last record read - margin)``
  on the new cluster; at-least-once with duplicates bounded by the margin.
* ``identity``: the same offset (offset-preserving mirrors).

The position used is what the query really read: its ranges abandoned on the
failed cluster lower it (:mod:`multikafka.coordinator.translation.abandoned`), and only
records actually read leave read marks (:mod:`multikafka.coordinator.translation.marks`).
Without a mark, the split starts at its earliest offset: more duplicates, never
a loss.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.state.stream_state import FailoverRecord, StreamView
from multikafka.coordinator.translation.marks import ReadMarks
from multikafka.core.exceptions import UnavailableError
from multikafka.core.model import ClusterState, FailoverStrategy, SplitId
from multikafka.core.offsets import clusters_of


@dataclass(frozen=True)
class Translation:
    """How one new split's starting offset was chosen (for the history)."""

    split: str
    source: str
    offset: int
    how: str


class FailoverTranslator:
    def __init__(self, discovery: Discovery, marks: ReadMarks) -> None:
        self._discovery = discovery
        self._marks = marks

    @staticmethod
    def record_for(
        view: StreamView, cluster: str, start: Mapping[str, int]
    ) -> FailoverRecord | None:
        """The failover that decides where ``cluster``'s splits start for a query
        at ``start``: the latest one into ``cluster``, while its source cluster
        is still FAILED and the query still holds the source's splits."""
        record = view.status.failover_into(cluster)
        if record is None:
            return None
        source = view.spec.clusters.get(record.from_cluster)
        if source is None or source.state is not ClusterState.FAILED:
            return None
        return record if record.from_cluster in clusters_of(start) else None

    async def translate(
        self,
        view: StreamView,
        record: FailoverRecord,
        splits: Sequence[SplitId],
        start: Mapping[str, int],
        abandoned: Mapping[str, int],
    ) -> tuple[dict[str, int], list[Translation]]:
        """Starting offsets of ``splits`` (all of ``record.to_cluster``) that can
        be resolved now; none while the new cluster does not answer a lookup
        they need (``identity`` needs none for splits with a counterpart)."""
        exact: dict[str, tuple[int, str, str]] = {}  # split -> (offset, source, how)
        lookups: dict[OffsetQuery, list[tuple[SplitId, str, str]]] = defaultdict(list)
        for b in splits:
            a = str(SplitId(record.from_cluster, b.topic, b.partition))
            if a not in start:
                why = "no counterpart on the failed cluster: earliest"
                lookups[OffsetQuery.earliest()].append((b, "", why))
                continue
            pos = min(start[a], abandoned.get(a, start[a]))
            if record.strategy is FailoverStrategy.IDENTITY:
                exact[str(b)] = (pos, a, f"identity from {a}@{pos}")
                continue
            mark = self._marks.at_or_before(view.name, a, pos - 1) if pos > 0 else None
            if mark is None:
                why = "nothing read yet" if pos == 0 else "no read mark"
                lookups[OffsetQuery.earliest()].append((b, a, f"{why} on {a}@{pos}: earliest"))
                continue
            ts = max(mark[1] - record.margin_ms, 0)
            how = f"time of {a}@{mark[0]} ({mark[1]} ms) - {record.margin_ms} ms margin"
            lookups[OffsetQuery.at_time(ts)].append((b, a, how))
        asks = list(lookups.items())
        try:
            answers = await asyncio.gather(
                *(
                    self._discovery.cluster_offsets(
                        view.name, record.to_cluster, [b for b, _, _ in items], query
                    )
                    for query, items in asks
                )
            )
        except UnavailableError:
            return {}, []  # the new cluster does not answer: try again next batch
        for (_, items), found in zip(asks, answers, strict=True):
            for b, a, how in items:
                if str(b) in found:
                    exact[str(b)] = (found[str(b)], a, how)
        entry = {s: off for s, (off, _, _) in exact.items()}
        notes = [Translation(s, a, off, how) for s, (off, a, how) in sorted(exact.items())]
        return entry, notes
