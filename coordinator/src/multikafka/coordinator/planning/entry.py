"""Where a split starts when a query first sees it (its *entry* offset).

Usually that is its cluster's starting position (earliest unless the stream
document says otherwise), so nothing added mid-query is missed. When the
cluster replaced a failed one the query still holds, the offset is translated
from the query's position on the failed cluster instead
(:mod:`multikafka.coordinator.translation`); when the cluster is MM2's replica
of one that is DRAINING, from that cluster's drain end offsets, which is where
queries stop reading it. When the cluster was removed from the
stream and added back within the stream's ``removed_cluster_retention``, its
splits resume where this query left them (:meth:`EntryOffsets.resume`), ahead
of both: those are the query's own positions on that very cluster.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.planning.end_vector import ClusterSnapshot, new_split_set
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.coordinator.translation import FailoverTranslator, Translation
from multikafka.core._offsets import SplitOffsets
from multikafka.core.exceptions import DataLossError
from multikafka.core.model import SplitId, StartingPosition, StartKind


@dataclass
class Resumed:
    """New splits of clusters added back that the query had left (see
    :meth:`EntryOffsets.resume`)."""

    #: split -> entry offset (where the query left it, or the log start if
    #: that was deleted meanwhile and data loss is allowed).
    entry: dict[str, int] = field(default_factory=dict)
    #: Splits the query left, resolved or not: they never take the starting
    #: position (one of an unreachable cluster waits for the next batch).
    claimed: set[str] = field(default_factory=set)
    #: split -> what was lost (only with failOnDataLoss=false).
    data_loss: dict[str, str] = field(default_factory=dict)


def query_for(position: StartingPosition | None) -> OffsetQuery:
    """The offset lookup of a cluster's starting position (default: earliest)."""
    if position is None or position.kind is StartKind.EARLIEST:
        return OffsetQuery.earliest()
    if position.kind is StartKind.LATEST:
        return OffsetQuery.latest()
    return OffsetQuery.at_time(position.timestamp_ms)


class EntryOffsets:
    def __init__(self, discovery: Discovery, translator: FailoverTranslator) -> None:
        self._discovery = discovery
        self._translator = translator

    async def resume(
        self,
        view: StreamView,
        new: Sequence[str],
        left: Mapping[str, SplitOffsets],
        *,
        fail_on_data_loss: bool = True,
    ) -> Resumed:
        """Entry offsets of the ``new`` splits the query ``left`` (cluster ->
        where it left that cluster's splits when the cluster was removed):
        the same offsets, checked against each partition's log start. Below
        it (retention deleted records while the cluster was out) is data
        loss: :class:`DataLossError`, or with ``fail_on_data_loss=False`` the
        split starts at the log start and the loss is reported."""
        out = Resumed()
        mine: dict[str, int] = {}
        for s in new:
            offsets = left.get(s.split("/", 1)[0])
            if offsets is not None and s in offsets:
                mine[s] = offsets[s]
        if not mine:
            return out
        out.claimed = set(mine)
        log_start = await self._discovery.split_offsets(
            view.name, (SplitId.parse(s) for s in mine), OffsetQuery.earliest()
        )
        for s, at in sorted(mine.items()):
            first = log_start.get(s)
            if first is None:
                continue  # cluster unreachable (or partition gone): next batch
            if at >= first:
                out.entry[s] = at
                continue
            text = (
                f"{s} resumes at {at}, where the query left it when its cluster was "
                f"removed, but the partition now starts at {first} (records deleted "
                "while the cluster was out of the stream)"
            )
            if fail_on_data_loss:
                raise DataLossError(f"{text}; set failOnDataLoss=false to skip lost data and go on")
            out.data_loss[s] = text
            out.entry[s] = first
        return out

    async def resolve(
        self,
        view: StreamView,
        start: Mapping[str, int],
        new: Sequence[str],
        abandoned: Mapping[str, int],
        *,
        group_id: str = "",
    ) -> tuple[dict[str, int], list[Translation]]:
        """Entry offsets of the ``new`` splits that can be resolved now (splits
        of unreachable clusters are left out and tried again next batch), and
        how the translated ones were chosen (``group_id``: the consumer group
        the query commits to, whose MM2 checkpoints ``mm2`` may use)."""
        by_cluster: dict[str, list[SplitId]] = defaultdict(list)
        for s in new:
            split = SplitId.parse(s)
            by_cluster[split.cluster].append(split)
        plain: dict[OffsetQuery, list[SplitId]] = defaultdict(list)
        translations = []
        for cid, splits in by_cluster.items():
            record = self._translator.record_for(view, cid, start)
            source = self._translator.drained_source(view, cid) if record is None else None
            if record is not None:
                translations.append(
                    self._translator.translate(
                        view, record, splits, start, abandoned, group_id=group_id
                    )
                )
                continue
            if source is not None:
                translations.append(self._drain(view, cid, source, splits, plain))
                continue
            plain[query_for(view.spec.clusters[cid].starting)].extend(splits)
        translated = await asyncio.gather(*translations)
        found = await asyncio.gather(
            *(self._discovery.split_offsets(view.name, s, q) for q, s in plain.items())
        )
        entry: dict[str, int] = {}
        notes: list[Translation] = []
        for offsets, how in translated:
            entry.update(offsets)
            notes.extend(how)
        for offsets in found:
            entry.update(offsets)
        return entry, notes

    async def _drain(
        self,
        view: StreamView,
        cluster: str,
        source: str,
        splits: Sequence[SplitId],
        plain: dict[OffsetQuery, list[SplitId]],
    ) -> tuple[dict[str, int], list[Translation]]:
        """The drain translation of ``splits``; those it cannot translate
        join ``plain`` (their cluster's starting position)."""
        done, how, rest = await self._translator.translate_drain(view, cluster, source, splits)
        plain[query_for(view.spec.clusters[cluster].starting)].extend(rest)
        return done, how

    def held(
        self,
        view: StreamView,
        start: Mapping[str, int],
        snapshots: Mapping[str, ClusterSnapshot],
        entry: Mapping[str, int],
    ) -> frozenset[str]:
        """FAILED clusters whose splits the query keeps this batch: those a
        failover replaced by a cluster whose splits have not all entered yet
        (it does not answer, or a translation waits for what was read last).
        Retired before, the query would no longer hold the position they
        translate from."""
        held = set()
        for cid, snap in snapshots.items():
            record = self._translator.record_for(view, cid, start)
            if record is None:
                continue
            if not snap.reachable or not len(snap.splits):
                held.add(record.from_cluster)
                continue
            new = new_split_set(start, {cid: snap})
            if any(s not in entry for s in new.ids()):
                held.add(record.from_cluster)
        return frozenset(held)
