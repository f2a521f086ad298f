"""MirrorMaker 2 as a failover translation (``multikafka.coordinator.translation.mm2``):
MM2's records byte for byte (``multikafka.core.mm2_records``), its topic names, and its translation rule.

How the golden bytes were derived (no MM2 or Kafka Connect runs here, so none
were captured): from apache/kafka ``OffsetSync.java`` (``KEY_SCHEMA``: topic
STRING, partition INT32; ``VALUE_SCHEMA``: upstreamOffset INT64, offset
INT64), ``Checkpoint.java`` (``KEY_SCHEMA``: group STRING, topic STRING,
partition INT32; ``HEADER_SCHEMA``: version INT16 = 0; ``VALUE_SCHEMA_V0``:
upstreamOffset INT64, offset INT64, metadata STRING), and how
``protocol.types.Schema.write`` lays a struct out: its fields in order,
nothing between them; ``Type.INT16/INT32/INT64`` as ``ByteBuffer.putShort/
putInt/putLong`` (big-endian); ``Type.STRING`` as ``putShort(UTF-8 length)``
then the UTF-8 bytes. ``Checkpoint.serializeValue`` writes the header struct,
then the value struct, into one buffer.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multikafka.coordinator.translation import mm2
from multikafka.coordinator.translation.mm2 import (
    MAX_SYNCS,
    ReplicationPolicy,
    SyncsLocation,
    SyncStore,
    checkpoints_topic,
    mirror_topic_problems,
    offset_syncs_topic,
    offset_syncs_topic_of,
    remote_topic,
)
from multikafka.core.mm2_records import Checkpoint, OffsetSync

INTERNALS = ("multikafka.coordinator.translation.mm2",)


def test_the_public_names_are_locked() -> None:
    # changing them is an API change, made on purpose
    assert mm2.__all__ == [
        "CHECKPOINT_VERSION",
        "MAX_SYNCS",
        "Checkpoint",
        "OffsetSync",
        "ReplicationPolicy",
        "SyncStore",
        "SyncsLocation",
        "checkpoints_topic",
        "mirror_topic_problems",
        "offset_syncs_topic",
        "offset_syncs_topic_of",
        "remote_topic",
    ]


# -- golden bytes -------------------------------------------------------------

# OffsetSync(orders-3, upstream 42, downstream 7)
SYNC_KEY = (
    b"\x00\x06orders"  # topic: STRING, int16 length 6, UTF-8
    + b"\x00\x00\x00\x03"  # partition: INT32 3
)
SYNC_VALUE = (
    b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # upstreamOffset: INT64 42
    + b"\x00\x00\x00\x00\x00\x00\x00\x07"  # offset (downstream): INT64 7
)

# Checkpoint(group "grp", remote topic east.orders-3, upstream 42, downstream 7, metadata "m")
CHECKPOINT_KEY = (
    b"\x00\x03grp"  # group: STRING
    + b"\x00\x0beast.orders"  # topic: STRING, 11 bytes
    + b"\x00\x00\x00\x03"  # partition: INT32 3
)
CHECKPOINT_VALUE = (
    b"\x00\x00"  # header struct: version INT16 0
    + b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # upstreamOffset: INT64 42
    + b"\x00\x00\x00\x00\x00\x00\x00\x07"  # offset (downstream): INT64 7
    + b"\x00\x01m"  # metadata: STRING
)


def test_offset_sync_encodes_as_mm2_writes_it() -> None:
    sync = OffsetSync("orders", 3, 42, 7)
    assert sync.encode() == (SYNC_KEY, SYNC_VALUE)
    assert OffsetSync.decode(SYNC_KEY, SYNC_VALUE) == sync


def test_checkpoint_encodes_as_mm2_writes_it() -> None:
    cp = Checkpoint("grp", "east.orders", 3, 42, 7, "m")
    assert cp.encode() == (CHECKPOINT_KEY, CHECKPOINT_VALUE)
    assert Checkpoint.decode(CHECKPOINT_KEY, CHECKPOINT_VALUE) == cp


def test_lengths_count_utf8_bytes_and_numbers_are_big_endian() -> None:
    # "café": 4 characters, 5 UTF-8 bytes (é is c3 a9); 2^40 + 1 and 2^33 as
    # putLong writes them, partition 2^31 - 1 as putInt
    key, value = OffsetSync("café", 2**31 - 1, 2**40 + 1, 2**33).encode()
    assert key == b"\x00\x05caf\xc3\xa9" + b"\x7f\xff\xff\xff"
    assert value == b"\x00\x00\x01\x00\x00\x00\x00\x01" + b"\x00\x00\x00\x02\x00\x00\x00\x00"
    # an empty metadata string is its length alone; a negative offset (which
    # MM2 filters out before writing, but the type allows) is two's complement
    _, cp = Checkpoint("g", "t", 0, 0, -1, "").encode()
    assert cp == b"\x00\x00" + b"\x00" * 8 + b"\xff" * 8 + b"\x00\x00"


# -- round trips ----------------------------------------------------------------

names = st.text(max_size=40)
offsets = st.integers(0, 2**63 - 1)
partitions = st.integers(0, 2**31 - 1)


@given(names, partitions, offsets, offsets)
def test_offset_syncs_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(topic, partition, up, down)
    assert OffsetSync.decode(*sync.encode()) == sync


@given(names, names, partitions, st.integers(-(2**63), 2**63 - 1), offsets, names)
def test_checkpoints_round_trip(
    group: str, topic: str, partition: int, up: int, down: int, metadata: str
) -> None:
    cp = Checkpoint(group, topic, partition, up, down, metadata)
    assert Checkpoint.decode(*cp.encode()) == cp


def test_a_string_over_32767_utf8_bytes_cannot_be_written() -> None:
    OffsetSync("x" * 32767, 0, 0, 0).encode()
    with pytest.raises(ValueError, match="topic: 32768 UTF-8 bytes"):
        OffsetSync("x" * 32768, 0, 0, 0).encode()
    with pytest.raises(ValueError, match="metadata: 32768 UTF-8 bytes"):
        Checkpoint("g", "t", 0, 0, 0, "é" * 16384).encode()


# -- decode errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (b"", SYNC_VALUE, "offset sync key: truncated at 'topic'"),
        (
            b"\x00\x06ord",
            SYNC_VALUE,
            "offset sync key: truncated at 'topic': needs 6 bytes, 3 left",
        ),
        (SYNC_KEY[:-1], SYNC_VALUE, "offset sync key: truncated at 'partition'"),
        (SYNC_KEY + b"\x00", SYNC_VALUE, "offset sync key: 1 unexpected bytes"),
        (b"\xff\xfe" + SYNC_KEY[2:], SYNC_VALUE, "'topic' has a negative length"),
        (b"\x00\x01\xff\x00\x00\x00\x00", SYNC_VALUE, "'topic' is not UTF-8"),
        (SYNC_KEY, SYNC_VALUE[:15], "offset sync value: truncated at 'offset'"),
        (SYNC_KEY, SYNC_VALUE + b"\x00", "offset sync value: 1 unexpected bytes"),
        (b"\x00\x01t\xff\xff\xff\xff", SYNC_VALUE, "offset sync: partition -1"),
        (SYNC_KEY, b"\xff" * 8 + SYNC_VALUE[8:], "offset sync: upstream offset -1"),
        (SYNC_KEY, SYNC_VALUE[:8] + b"\x80" + b"\x00" * 7, "offset sync: downstream offset -9"),
    ],
)
def test_offset_sync_garbage_is_refused_saying_what_is_wrong(
    key: bytes, value: bytes, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        OffsetSync.decode(key, value)


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (CHECKPOINT_KEY, b"\x00\x01" + CHECKPOINT_VALUE[2:], "version 1 is unknown"),
        (CHECKPOINT_KEY, b"\xff\xff" + CHECKPOINT_VALUE[2:], "version -1 is unknown"),
        (CHECKPOINT_KEY, b"", "checkpoint value: truncated at 'version'"),
        (CHECKPOINT_KEY, CHECKPOINT_VALUE[:-1], "checkpoint value: truncated at 'metadata'"),
        (CHECKPOINT_KEY, CHECKPOINT_VALUE + b"x", "checkpoint value: 1 unexpected bytes"),
        (CHECKPOINT_KEY[:5], CHECKPOINT_VALUE, "checkpoint key: truncated at 'topic'"),
        (SYNC_KEY, CHECKPOINT_VALUE, "checkpoint key: truncated at"),  # a sync's key
    ],
)
def test_checkpoint_garbage_and_unknown_versions_are_refused(
    key: bytes, value: bytes, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        Checkpoint.decode(key, value)


# -- topic names ------------------------------------------------------------------------


def test_internal_topic_names() -> None:
    assert offset_syncs_topic("west") == "mm2-offset-syncs.west.internal"
    assert checkpoints_topic("east") == "east.checkpoints.internal"
    # on the source (MM2's default) named for the target; on the target (KIP-716) for the source
    assert offset_syncs_topic_of(SyncsLocation.SOURCE, "east", "west") == (
        "mm2-offset-syncs.west.internal"
    )
    assert offset_syncs_topic_of(SyncsLocation.TARGET, "east", "west") == (
        "mm2-offset-syncs.east.internal"
    )


def test_remote_topics_by_policy() -> None:
    assert remote_topic(ReplicationPolicy.DEFAULT, "east", "orders") == "east.orders"
    assert remote_topic(ReplicationPolicy.DEFAULT, "east", "a.b") == "east.a.b"
    assert remote_topic(ReplicationPolicy.IDENTITY, "east", "orders") == "orders"
    # IdentityReplicationPolicy still prefixes heartbeats (looksLikeHeartbeat)
    assert remote_topic(ReplicationPolicy.IDENTITY, "east", "heartbeats") == "east.heartbeats"


def test_a_mirror_s_topics_follow_the_policy() -> None:
    default, identity = ReplicationPolicy.DEFAULT, ReplicationPolicy.IDENTITY
    assert (
        mirror_topic_problems(default, "east", ["orders", "pay"], ["east.pay", "east.orders"]) == []
    )
    assert mirror_topic_problems(identity, "east", ["orders"], ["orders"]) == []
    assert mirror_topic_problems(default, "east", ["orders", "pay"], ["orders", "east.pay"]) == [
        "'orders' on the source is 'east.orders' on the mirror (default policy), "
        "which the mirror does not list",
        "'orders' on the mirror is no source topic's remote topic "
        "(default policy, source alias 'east')",
    ]


# -- the translation rule ------------------------------------------------------------------


def store_of(*syncs: tuple[int, int]) -> SyncStore:
    store = SyncStore()
    for up, down in syncs:
        store.add(OffsetSync("orders", 0, up, down))
    return store


def test_a_position_at_a_sync_translates_to_its_downstream_offset_without_plus_one() -> None:
    # position 100: records < 100 read, record 100 not; its copy is 500
    # (500 + 1 would skip it)
    store = store_of((100, 500))
    assert store.translate("orders", 0, 100) == 500


def test_a_position_past_a_sync_translates_one_past_its_downstream_offset() -> None:
    # position 101: record 100 was read, its copy 500 may be skipped; records
    # after it are read again whether or not they were copied
    store = store_of((100, 500))
    assert store.translate("orders", 0, 101) == 501
    assert store.translate("orders", 0, 10_000) == 501


def test_the_newest_sync_at_or_before_the_position_is_used() -> None:
    store = store_of((10, 20), (50, 70), (90, 130))
    assert store.translate("orders", 0, 49) == 21
    assert store.translate("orders", 0, 50) == 70
    assert store.translate("orders", 0, 89) == 71
    assert store.translate("orders", 0, 90) == 130


def test_no_usable_sync_is_no_translation() -> None:
    store = store_of((100, 500), (200, 600))
    assert store.translate("orders", 0, 99) is None  # older than every sync
    assert store.translate("orders", 1, 300) is None  # another partition
    assert store.translate("other", 0, 300) is None
    assert SyncStore().translate("orders", 0, 0) is None
    with pytest.raises(ValueError, match="position -1 is negative"):
        store.translate("orders", 0, -1)


def test_a_source_topic_that_went_back_starts_over() -> None:
    # MM2's upstreamRewind: the source topic was recreated
    store = store_of((100, 500), (200, 600), (5, 700))
    assert store.kept("orders", 0) == (OffsetSync("orders", 0, 5, 700),)
    assert store.translate("orders", 0, 150) == 701


def test_a_remote_topic_that_went_back_starts_over() -> None:
    # the remote topic was truncated: its offsets restart at 0 for upstream 300.
    # With the old syncs kept (as MM2 does), position 250 would be 601, past
    # the copies of 300.. (at 0..) which were not read.
    store = store_of((100, 500), (200, 600), (300, 0))
    assert store.translate("orders", 0, 250) is None
    assert store.translate("orders", 0, 300) == 0


def test_the_same_record_copied_again_replaces_its_sync() -> None:
    store = store_of((100, 500), (100, 520))
    assert store.kept("orders", 0) == (OffsetSync("orders", 0, 100, 520),)
    assert store.translate("orders", 0, 100) == 520


def test_memory_is_bounded_and_the_earliest_and_newest_syncs_are_kept() -> None:
    store = store_of(*((up, up // 2) for up in range(0, 2_000_000, 7)))
    kept = store.kept("orders", 0)
    assert len(kept) <= MAX_SYNCS
    assert len(kept) < 60  # about two per power of two of 2 million
    assert kept[0].upstream_offset == 1_999_998
    assert kept[-1].upstream_offset == 0
    ups = [s.upstream_offset for s in kept]
    assert ups == sorted(ups, reverse=True)


def test_a_position_d_behind_the_newest_sync_translates_from_at_most_about_d_further_back() -> None:
    store = store_of(*((up, up) for up in range(100_000)))  # every record synced
    newest = 99_999
    for p in range(0, 100_000, 37):
        used = next(s for s in store.kept("orders", 0) if s.upstream_offset <= p)
        assert p - used.upstream_offset <= max(newest - p, 1)


# -- never past an unread record: a simulated mirror -------------------------------------


@st.composite
def mirrors(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(every copy as (upstream, downstream), the syncs MM2 emitted): records
    dropped by filters or transactions leave upstream gaps, compaction and
    transaction markers downstream gaps; syncs are some of the copies, in order."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    n = draw(st.integers(1, 400))
    copies, down = [], rng.randrange(0, 50)
    for up in range(rng.randrange(0, 50), 50 + n):
        if rng.random() < 0.7:
            copies.append((up, down))
            down += 1 + (rng.randrange(5) if rng.random() < 0.1 else 0)
    every = draw(st.sampled_from([1, 2, 10, 100]))
    syncs = [c for i, c in enumerate(copies) if i % every == 0 or rng.random() < 0.05]
    return copies, syncs


@settings(max_examples=300, deadline=None)
@given(mirrors())
def test_translation_never_skips_a_record_that_was_not_read(
    mirror: tuple[list[tuple[int, int]], list[tuple[int, int]]],
) -> None:
    copies, syncs = mirror
    store = store_of(*syncs)
    last = copies[-1][0] if copies else 0
    for p in range(last + 3):
        target = store.translate("orders", 0, p)
        if not syncs or p < syncs[0][0]:  # before the earliest sync (always kept)
            assert target is None
            continue
        assert target is not None
        # every copy the target position skips is of a record the query read
        skipped = [up for up, down in copies if down < target]
        assert all(up < p for up in skipped), (p, target, skipped)
        # and it is no further back than the newest kept sync allows
        used = next(s for s in store.kept("orders", 0) if s.upstream_offset <= p)
        assert target >= used.downstream_offset
