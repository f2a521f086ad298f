"""Where a split starts when a query first sees it (its *entry* offset).

Usually that is its cluster's starting position (earliest unless the stream
document says otherwise), so nothing added mid-query is missed. When the
cluster replaced a failed one the query still holds, the offset is translated
from the query's position on the failed cluster instead
(:mod:`coordinator.translation`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence

from coordinator.discovery import Discovery
from coordinator.stream_state import StreamView
from coordinator.translation import FailoverTranslator, Translation
from multikafka_core.model import SplitId, StartingPosition, StartKind
from multikafka_core.providers import OffsetQuery


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

    async def resolve(
        self,
        view: StreamView,
        start: Mapping[str, int],
        new: Sequence[str],
        abandoned: Mapping[str, int],
    ) -> tuple[dict[str, int], list[Translation]]:
        """Entry offsets of the ``new`` splits that can be resolved now (splits
        of unreachable clusters are left out and tried again next batch), and
        how the translated ones were chosen."""
        by_cluster: dict[str, list[SplitId]] = defaultdict(list)
        for s in new:
            split = SplitId.parse(s)
            by_cluster[split.cluster].append(split)
        plain: dict[OffsetQuery, list[SplitId]] = defaultdict(list)
        translations = []
        for cid, splits in by_cluster.items():
            record = self._translator.record_for(view, cid, start)
            if record is not None:
                translations.append(
                    self._translator.translate(view, record, splits, start, abandoned)
                )
            else:
                plain[query_for(view.spec.clusters[cid].starting)].extend(splits)
        translated, found = await asyncio.gather(
            asyncio.gather(*translations),
            asyncio.gather(
                *(self._discovery.split_offsets(view.name, s, q) for q, s in plain.items())
            ),
        )
        entry: dict[str, int] = {}
        notes: list[Translation] = []
        for offsets, how in translated:
            entry.update(offsets)
            notes.extend(how)
        for offsets in found:
            entry.update(offsets)
        return entry, notes
