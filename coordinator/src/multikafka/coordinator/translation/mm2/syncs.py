"""Offset syncs kept per source topic-partition, and MM2's translation of a
source position to the target (MM2's ``OffsetSyncStore``).

Positions are next offsets to read, as a query's positions and a consumer
group's committed offsets (which MM2 translates) are: position ``p`` means
records ``< p`` were read and record ``p`` was not.

**The rule** (``OffsetSyncStore.translateDownstream``): take the newest kept
sync ``s`` with ``s.upstream_offset <= p``; the position on the target is
``s.downstream_offset`` when ``p == s.upstream_offset`` and
``s.downstream_offset + 1`` when ``p > s.upstream_offset`` (MM2's
``upstreamStep``). No such sync: no translation (MM2 returns -1 or nothing;
the caller falls back to ``timestamp``).

Why it never moves past an unread record: MM2 copies a partition in order, so
every copy below ``s.downstream_offset`` is of a record below
``s.upstream_offset``. With ``p == s.upstream_offset`` record ``p`` is unread
and its copy is ``s.downstream_offset`` itself, so no ``+1``. With
``p > s.upstream_offset`` that record was read, so its copy may be skipped,
but nothing more: records between the sync and ``p`` may or may not have
been copied (filters, transactions, gaps), so they are read again
(duplicates, never a loss). Any sync older than the newest one is as safe,
only less precise: that is what lets the store forget syncs.

**What is kept**: MM2 keeps 64 syncs per partition at exponentially growing
distances behind the newest (its invariants B and C) and always the earliest
(invariant D). Here, for each power-of-two distance ``[2^(k-1), 2^k)`` behind
the newest sync, the newest and the oldest sync at that distance are kept,
with the newest and the earliest sync overall: at most :data:`MAX_SYNCS`
(a simpler rule than MM2's in-place repair of its invariants, at twice the
memory). With a sync for every record, a position ``d`` behind the newest
sync translates from a sync at most ``d`` further back (a test checks it);
sparser syncs give what they can, as in MM2.

**Starting over**: a sync whose upstream offset is below the newest one's
(the source topic was recreated: MM2's ``upstreamRewind``) replaces all
others. So does a later record whose downstream offset is not above the
newest one's (the remote topic was truncated or recreated): MM2 keeps the
older syncs then, whose downstream offsets no longer describe the remote
topic; here they are dropped, as translating with them could skip unread
records. A sync of the newest one's upstream record with a later downstream
offset (copied again after a task restarted) replaces it.

Like MM2 (``readToEnd``), a caller translates only after reading the whole
offset-syncs topic. MM2's ``onlyLoadLastOffset`` (keep only the last sync
while first reading the topic, so its checkpoints never go backwards across
restarts) has no counterpart: a failover translates once, from every sync.
"""

from __future__ import annotations

from multikafka.core.mm2_records import OffsetSync

#: Syncs kept per topic-partition: two per power-of-two distance (1 up to
#: 2^63), the newest and the earliest.
MAX_SYNCS = 2 * 63 + 2


def _thin(syncs: list[OffsetSync]) -> list[OffsetSync]:
    """Of ``syncs`` (newest first, upstream offsets strictly decreasing), the
    newest, the earliest, and the newest and oldest per power-of-two distance
    behind the newest."""
    newest = syncs[0].upstream_offset
    per_distance: dict[int, list[OffsetSync]] = {}
    for s in syncs[1:-1]:
        per_distance.setdefault((newest - s.upstream_offset).bit_length(), []).append(s)
    kept = [syncs[0]]
    for group in per_distance.values():  # in order of distance (insertion order)
        kept += group if len(group) <= 2 else [group[0], group[-1]]
    if len(syncs) > 1:
        kept.append(syncs[-1])
    return kept


class SyncStore:
    """The offset syncs of one MM2 replication (source -> target), per source
    topic-partition, and the translation of source positions."""

    def __init__(self) -> None:
        #: (source topic, partition) -> kept syncs, newest first.
        self._syncs: dict[tuple[str, int], list[OffsetSync]] = {}

    def add(self, sync: OffsetSync) -> None:
        """Take one sync, in the order of the offset-syncs topic."""
        key = (sync.topic, sync.partition)
        syncs = self._syncs.get(key)
        up, down = sync.upstream_offset, sync.downstream_offset
        if syncs and up > syncs[0].upstream_offset and down > syncs[0].downstream_offset:
            self._syncs[key] = _thin([sync, *syncs])
        elif syncs and up == syncs[0].upstream_offset and down >= syncs[0].downstream_offset:
            syncs[0] = sync  # the same record copied again (a task restarted): the later copy
        else:  # the first, or either topic went back: the older syncs describe other data
            self._syncs[key] = [sync]

    def partitions(self) -> list[tuple[str, int]]:
        """The source topic-partitions with kept syncs."""
        return sorted(self._syncs)

    def restore(self, syncs: list[OffsetSync]) -> None:
        """Take back one partition's kept syncs (newest first), as :meth:`kept`
        gave them: a summary written by an earlier leader."""
        if syncs:
            self._syncs[(syncs[0].topic, syncs[0].partition)] = list(syncs)

    def kept(self, topic: str, partition: int) -> tuple[OffsetSync, ...]:
        """The syncs kept for a source topic-partition, newest first."""
        return tuple(self._syncs.get((topic, partition), ()))

    def translate(self, topic: str, partition: int, position: int) -> int | None:
        """The position on the target (the next offset to read of the remote
        topic's ``partition``) for ``position`` (the next offset to read of
        the source's ``topic``/``partition``), or None when no kept sync is at
        or before it (none at all, or all newer)."""
        found = self.translate_with(topic, partition, position)
        return None if found is None else found[0]

    def translate_with(
        self, topic: str, partition: int, position: int
    ) -> tuple[int, OffsetSync] | None:
        """:meth:`translate`, and the sync it used."""
        if position < 0:
            raise ValueError(f"position {position} is negative")
        for s in self._syncs.get((topic, partition), ()):
            if s.upstream_offset <= position:
                return s.downstream_offset + (0 if position == s.upstream_offset else 1), s
        return None
