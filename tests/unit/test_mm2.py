"""MirrorMaker 2 as a failover translation (``multikafka.coordinator.translation.mm2``):
MM2's records byte for byte, its topic names, and its translation rule.

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

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multikafka.coordinator.translation.mm2 import (
    Checkpoint,
    OffsetSync,
    ReplicationPolicy,
    SyncsLocation,
    checkpoints_topic,
    mirror_topic_problems,
    offset_syncs_topic,
    offset_syncs_topic_of,
    remote_topic,
)

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
