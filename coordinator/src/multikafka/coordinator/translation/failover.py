"""Failover translation: where the splits of a cluster that replaced a failed
one start, for a query that was reading the failed cluster.

* ``timestamp``: ``offsets_for_times(time of the last record read - margin)``
  on the new cluster; at-least-once with duplicates bounded by the margin.
* ``identity``: the same offset (offset-preserving mirrors).
* ``mm2``: MirrorMaker 2's offset syncs (:mod:`.mm2`): the downstream offset
  of the newest sync at or before the position, +1 when past it; without
  such a sync, MM2's checkpoint of the query's consumer group
  (``commitGroupId``) when it is at or before the position; else
  ``timestamp``, and the translation says so.

A split of the new cluster takes over from the failed cluster's split of the
same partition of the same topic, or of the topic an ``mm2`` block between
the two renames it from (``east.orders`` on the mirror is ``orders``).

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
from multikafka.coordinator.translation.mm2.records import Checkpoint
from multikafka.coordinator.translation.mm2.tracker import MirrorSyncs
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
    def __init__(
        self, discovery: Discovery, marks: ReadMarks, syncs: MirrorSyncs | None = None
    ) -> None:
        self._discovery = discovery
        self._marks = marks
        self._syncs = syncs

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
        *,
        group_id: str = "",
    ) -> tuple[dict[str, int], list[Translation]]:
        """Starting offsets of ``splits`` (all of ``record.to_cluster``) that can
        be resolved now; none while the new cluster does not answer a lookup
        they need (``identity`` needs none for splits with a counterpart)."""
        exact: dict[str, tuple[int, str, str]] = {}  # split -> (offset, source, how)
        lookups: dict[OffsetQuery, list[tuple[SplitId, str, str]]] = defaultdict(list)
        for b in splits:
            topic = view.spec.counterpart_topic(record.to_cluster, record.from_cluster, b.topic)
            source = SplitId(record.from_cluster, topic or b.topic, b.partition)
            a = str(source)
            if topic is None or a not in start:
                why = "no counterpart on the failed cluster: earliest"
                lookups[OffsetQuery.earliest()].append((b, "", why))
                continue
            pos = min(start[a], abandoned.get(a, start[a]))
            if record.strategy is FailoverStrategy.IDENTITY:
                exact[str(b)] = (pos, a, f"identity from {a}@{pos}")
                continue
            fallback = ""
            if record.strategy is FailoverStrategy.MM2:
                hit = (
                    self._syncs.translate(view.name, record.to_cluster, source, pos)
                    if self._syncs
                    else None
                )
                if hit is not None:
                    up, down = hit.sync.upstream_offset, hit.sync.downstream_offset
                    how = f"mm2 from {a}@{pos} by the sync {up} -> {down}"
                    exact[str(b)] = (hit.offset, a, how)
                    continue
                cp = self._checkpoint(view, record.to_cluster, group_id, b, pos)
                if cp is not None:
                    how = (
                        f"mm2 from {a}@{pos} by group {group_id}'s checkpoint "
                        f"{cp.upstream_offset} -> {cp.downstream_offset}"
                    )
                    exact[str(b)] = (cp.downstream_offset, a, how)
                    continue
                fallback = f"no MM2 offset sync at or before {a}@{pos}, so timestamp: "
            mark = self._marks.at_or_before(view.name, a, pos - 1) if pos > 0 else None
            if mark is None:
                why = "nothing read yet" if pos == 0 else "no read mark"
                how = f"{fallback}{why} on {a}@{pos}: earliest"
                lookups[OffsetQuery.earliest()].append((b, a, how))
                continue
            ts = max(mark[1] - record.margin_ms, 0)
            how = f"{fallback}time of {a}@{mark[0]} ({mark[1]} ms) - {record.margin_ms} ms margin"
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

    def _checkpoint(
        self, view: StreamView, mirror: str, group_id: str, split: SplitId, position: int
    ) -> Checkpoint | None:
        """MM2's checkpoint of the query's consumer group for ``split`` (of
        the mirror), when it translates a position at or before the query's:
        MM2 computed its downstream offset by the same rule, so starting
        there never skips an unread record."""
        if not group_id or self._syncs is None:
            return None
        cp = self._syncs.checkpoint(view.name, mirror, group_id, split.topic, split.partition)
        return cp if cp is not None and 0 <= cp.upstream_offset <= position else None

    @staticmethod
    def drained_source(view: StreamView, cluster: str) -> str | None:
        """The cluster ``cluster`` is MM2's replica of, while that one is
        DRAINING with captured end offsets: a query then reads it up to those
        ends, so ``cluster``'s splits start at their translation."""
        mirror = view.spec.clusters[cluster].mm2
        if mirror is None or mirror.source not in view.status.drains:
            return None
        source = view.spec.clusters.get(mirror.source)
        return (
            mirror.source if source is not None and source.state is ClusterState.DRAINING else None
        )

    def translate_drain(
        self, view: StreamView, cluster: str, source: str, splits: Sequence[SplitId]
    ) -> tuple[dict[str, int], list[Translation], list[SplitId]]:
        """Starting offsets of ``splits`` (of ``cluster``, MM2's replica of the
        DRAINING ``source``): each the translation of its counterpart's drain
        end offset. The splits without a usable sync are returned last; they
        take their cluster's starting position."""
        ends = view.status.drains[source]
        entry: dict[str, int] = {}
        notes: list[Translation] = []
        rest: list[SplitId] = []
        for b in splits:
            topic = view.spec.counterpart_topic(cluster, source, b.topic)
            a = SplitId(source, topic or b.topic, b.partition)
            end = ends.get(str(a)) if topic is not None else None
            hit = (
                self._syncs.translate(view.name, cluster, a, end)
                if end is not None and self._syncs is not None
                else None
            )
            if hit is None:
                rest.append(b)
                continue
            up, down = hit.sync.upstream_offset, hit.sync.downstream_offset
            how = f"mm2 from the drain end {a}@{end} by the sync {up} -> {down}"
            entry[str(b)] = hit.offset
            notes.append(Translation(str(b), str(a), hit.offset, how))
        return entry, notes, rest
