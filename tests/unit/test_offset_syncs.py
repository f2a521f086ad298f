"""When the dev stack's mirror writes an MM2 offset sync
(``multikafka.devstack.offset_syncs``: MM2's ``OffsetSyncWriter`` rule), and
what that gives a failover translating with the coordinator's ``SyncStore``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multikafka.coordinator.translation.mm2 import SyncStore
from multikafka.coordinator.translation.mm2.bound import ReadAgain, read_again
from multikafka.core.mm2_records import OffsetSync
from multikafka.devstack.offset_syncs import OFFSET_LAG_MAX, OffsetSyncWriter

INTERNALS = (
    "multikafka.coordinator.translation.mm2",
    "multikafka.coordinator.translation.mm2.bound",
)


def synced_upstreams(writer: OffsetSyncWriter, pairs: list[tuple[int, int]]) -> list[int]:
    """Upstream offsets of the syncs written at once for ``pairs`` of
    (upstream, downstream) copied on partition 0."""
    out = []
    for up, down in pairs:
        sync = writer.copied("orders", 0, up, down)
        if sync is not None:
            assert sync == OffsetSync("orders", 0, up, down)
            out.append(up)
    return out


def test_mm2s_default_lag_is_100() -> None:
    assert OFFSET_LAG_MAX == 100
    assert OffsetSyncWriter().offset_lag_max == 100


def test_the_first_record_then_every_lag_plus_one_records() -> None:
    # downstream - (last sync's downstream + 1) >= 3: records 0, 4, 8, ...
    writer = OffsetSyncWriter(offset_lag_max=3)
    assert synced_upstreams(writer, [(u, u + 10) for u in range(13)]) == [0, 4, 8, 12]


def test_staleness_is_counted_downstream() -> None:
    # a gap in the remote topic (a transaction marker) brings the next sync
    # one record closer than without it (4)
    writer = OffsetSyncWriter(offset_lag_max=3)
    pairs = [(0, 10), (1, 11), (2, 13), (3, 14), (4, 15)]
    assert synced_upstreams(writer, pairs) == [0, 3]


def test_a_skipped_upstream_offset_is_synced_at_once() -> None:
    writer = OffsetSyncWriter(offset_lag_max=100)
    assert synced_upstreams(writer, [(0, 0), (1, 1), (3, 2), (4, 3)]) == [0, 3]


def test_a_remote_topic_that_went_back_is_synced_at_once() -> None:
    writer = OffsetSyncWriter(offset_lag_max=100)
    assert synced_upstreams(writer, [(0, 50), (1, 51), (2, 7), (3, 8)]) == [0, 2]


def test_lag_zero_syncs_every_record() -> None:
    writer = OffsetSyncWriter(offset_lag_max=0)
    assert synced_upstreams(writer, [(u, u) for u in range(5)]) == [0, 1, 2, 3, 4]


def test_partitions_are_independent() -> None:
    writer = OffsetSyncWriter(offset_lag_max=2)
    assert writer.copied("orders", 0, 0, 0) is not None
    assert writer.copied("orders", 1, 0, 5) is not None  # its own first record
    assert writer.copied("other", 0, 0, 0) is not None
    assert writer.copied("orders", 0, 1, 1) is None


def test_a_commit_writes_the_newest_delayed_sync_of_each_partition() -> None:
    writer = OffsetSyncWriter(offset_lag_max=100)
    for up in range(5):
        writer.copied("orders", 0, up, up + 1)
    writer.copied("orders", 1, 0, 0)
    writer.copied("orders", 1, 1, 1)
    assert writer.commit() == [OffsetSync("orders", 0, 4, 5), OffsetSync("orders", 1, 1, 1)]
    assert writer.commit() == []  # written once


def test_a_sync_written_at_once_drops_the_delayed_one() -> None:
    writer = OffsetSyncWriter(offset_lag_max=2)
    writer.copied("orders", 0, 0, 0)
    writer.copied("orders", 0, 1, 1)  # delayed
    assert writer.copied("orders", 0, 2, 3) is not None  # 3 - (0 + 1) >= 2
    assert writer.commit() == []


def test_a_promoted_sync_does_not_reset_staleness() -> None:
    # as in MM2: only syncs written at once move the last sync's downstream offset
    writer = OffsetSyncWriter(offset_lag_max=3)
    assert synced_upstreams(writer, [(0, 0), (1, 1)]) == [0]
    assert writer.commit() == [OffsetSync("orders", 0, 1, 1)]
    assert synced_upstreams(writer, [(2, 2), (3, 3), (4, 4)]) == [4]


def test_a_negative_lag_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        OffsetSyncWriter(offset_lag_max=-1)


def test_read_again_counts_what_the_translation_reads_twice() -> None:
    syncs = [
        OffsetSync("orders", 0, 0, 10),
        OffsetSync("orders", 0, 101, 111),
        OffsetSync("orders", 0, 202, 212),
        OffsetSync("orders", 1, 0, 0),
        OffsetSync("orders", 2, 5, 7),
    ]
    positions = {("orders", 0): 150, ("orders", 1): 0, ("orders", 2): 3}
    # partition 0: from the sync of 101 (one past it), 102..149 again: 48,
    # bound 100 + 52 behind the newest; partition 1: exactly at its sync,
    # nothing again, bound 100; partition 2: no sync at or below 3
    assert read_again(syncs, positions, 100) == ReadAgain(48, 252, (("orders", 2),))


def test_read_again_allows_for_syncs_the_coordinator_may_not_have_read() -> None:
    syncs = [OffsetSync("orders", 0, 0, 10), OffsetSync("orders", 0, 101, 111)] + [
        OffsetSync("orders", 0, 101 * k, 101 * k + 10) for k in range(2, 6)
    ]
    # known for sure: up to 101; maybe up to 505. Position 450: from the
    # sync of 404 if all are known (45 again); from 101's if only those two
    # are (348 again): the bound is 100 + 349, the farther of 101 and 505
    again = read_again(syncs, {("orders", 0): 450}, 100, surely_known=2)
    assert again == ReadAgain(45, 449)
    assert again.bound >= 450 - 101 - 1
    # a partition with no sync known for sure may fall back to timestamp:
    # no bound, but what MM2's rule gives with every sync is still said
    assert read_again(syncs, {("orders", 0): 450}, 100, surely_known=0) == ReadAgain(
        45, 0, (("orders", 0),)
    )


def newest_at_or_below(syncs: list[OffsetSync], position: int) -> int:
    """MM2's rule over every sync written (no sync forgotten)."""
    s = max((s for s in syncs if s.upstream_offset <= position), key=lambda s: s.upstream_offset)
    return s.downstream_offset + (0 if position == s.upstream_offset else 1)


@settings(max_examples=200, deadline=None)
@given(
    lag=st.integers(0, 300),
    records=st.integers(1, 2000),
    shift=st.integers(0, 1000),
    markers=st.sets(st.integers(0, 1999), max_size=50),
)
def test_a_failover_reads_at_most_offset_lag_max_records_again(
    lag: int, records: int, shift: int, markers: set[int]
) -> None:
    # Records 0..records-1 copied in order, downstream shifted, a marker in
    # the remote topic after each upstream offset in ``markers``; only syncs
    # written at once. Every position p from 0 to the end translates (MM2's
    # rule over every sync) to at most the copy of record p (nothing
    # skipped) and reads at most ``lag`` records again. The coordinator's
    # SyncStore, which forgets syncs far behind the newest as MM2's
    # OffsetSyncStore does, gives the same from the second newest sync on,
    # and further back at most as many more as the position is behind the
    # newest sync.
    writer = OffsetSyncWriter(offset_lag_max=lag)
    store = SyncStore()
    syncs: list[OffsetSync] = []
    copy_of: list[int] = []
    down = shift
    for up in range(records):
        copy_of.append(down)
        sync = writer.copied("orders", 0, up, down)
        if sync is not None:
            store.add(sync)
            syncs.append(sync)
        down += 2 if up in markers else 1
    second_newest = syncs[-2].upstream_offset if len(syncs) > 1 else 0
    for p in range(records + 1):
        start = newest_at_or_below(syncs, p)
        next_copy = copy_of[p] if p < records else down
        assert start <= next_copy, f"position {p} translated past its record"
        assert sum(1 for up in range(p) if copy_of[up] >= start) <= lag
        if p >= second_newest:
            assert store.translate("orders", 0, p) == start
        # further back, what the store forgot costs at most the distance to the newest sync
        kept = store.translate("orders", 0, p)
        assert kept is not None
        assert kept <= start
        behind = max(syncs[-1].upstream_offset - p, 0)
        assert sum(1 for up in range(p) if copy_of[up] >= kept) <= lag + behind
