"""How many records a failover with MM2's translation reads again: the bound
that :class:`.SyncStore`'s rule gives over the syncs MM2's writer produces
(``multikafka.devstack.offset_syncs``, whose docstring derives it). The
failover tests and the ``failover_gap`` benchmark check failovers against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from multikafka.coordinator.translation.mm2.syncs import SyncStore
from multikafka.core.mm2_records import OffsetSync

__all__ = ["ReadAgain", "read_again"]


@dataclass(frozen=True)
class ReadAgain:
    """What a failover with MM2's translation reads again (see :func:`read_again`)."""

    #: Records the translation reads again when it knows every sync.
    expected: int
    #: At most this many, with any of the syncs it may know: per partition
    #: ``offset_lag_max`` plus the distance between the position and the
    #: partition's newest known sync.
    bound: int
    #: (topic, partition) with no sync at or below the position the
    #: coordinator surely knew: it may fall back to ``timestamp`` there (not
    #: in ``bound``).
    unsynced: tuple[tuple[str, int], ...] = ()


def read_again(
    syncs: Sequence[OffsetSync],
    positions: Mapping[tuple[str, int], int],
    offset_lag_max: int,
    *,
    surely_known: int | None = None,
) -> ReadAgain:
    """The records a failover reads again when it translates ``positions``
    ((source topic, partition) -> the next offset the query reads) with MM2's
    rule over ``syncs`` (in the order written) as the coordinator keeps them
    (``SyncStore``), on a source whose offsets below the positions are all
    records (no markers). The coordinator knows the first ``surely_known``
    syncs (default all) and maybe some of the rest: it tails them every
    second or so, and a source that died took the newest with it.

    The bound, per partition, for the newest sync ``u`` the coordinator knows:
    past ``u``, the records after it; at or below it, at most
    ``offset_lag_max`` plus the distance from ``u`` (nearest the newest sync,
    ``offset_lag_max``: see ``multikafka.devstack.offset_syncs``; further back the store
    has forgotten syncs, as MM2's ``OffsetSyncStore`` has, which costs at most
    that distance more: ``tests/unit/test_offset_syncs.py`` checks both).
    ``offset_lag_max + |u - p|`` covers both, and over the ``u`` that may be
    known it is largest at the oldest and at the newest."""
    n = len(syncs) if surely_known is None else surely_known
    store, early = SyncStore(), SyncStore()
    for i, s in enumerate(syncs):
        store.add(s)
        if i < n:
            early.add(s)
    expected = bound = 0
    unsynced = []
    for (topic, partition), p in sorted(positions.items()):
        found = store.translate_with(topic, partition, p)
        if found is not None:
            expected += max(p - found[1].upstream_offset - 1, 0)
        if found is None or early.translate(topic, partition, p) is None:
            unsynced.append((topic, partition))
            continue
        newest = [
            k[0].upstream_offset
            for k in (store.kept(topic, partition), early.kept(topic, partition))
        ]
        bound += offset_lag_max + max(abs(u - p) for u in newest)
    return ReadAgain(expected, bound, tuple(unsynced))
