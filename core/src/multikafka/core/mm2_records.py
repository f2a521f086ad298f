"""MirrorMaker 2's records, encoded and decoded as MM2 does
(apache/kafka ``connect/mirror/.../OffsetSync.java`` and
``connect/mirror-client/.../Checkpoint.java``), beside MM2's naming
(:mod:`multikafka.core.mm2`): the coordinator reads them, the dev stack's
mirrors write them.

* :class:`OffsetSync`: one record of the offset-syncs topic: upstream record
  ``upstream_offset`` of a source topic-partition was replicated as record
  ``downstream_offset`` of its remote topic;
* :class:`Checkpoint`: one record of the checkpoints topic on the target: a
  consumer group's position translated by MM2.

Records use Kafka's struct encoding (``protocol.types.Schema.write``): fields
in schema order, no field names, no framing; INT16/INT32/INT64 big-endian
two's complement, STRING an INT16 byte length then that many UTF-8 bytes.
Decoding is stricter than MM2's (which reads what it can and ignores the
rest): trailing bytes, invalid UTF-8, a negative partition or a negative
offset in a sync are refused with a ``ValueError`` (MM2 never writes them), so
garbage is not mistaken for a sync, and a checkpoint of an unknown version is
refused (MM2 only ``assert``s the version).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1

#: The only value version MM2 writes for checkpoints (``Checkpoint.VERSION``).
CHECKPOINT_VERSION = 0


def _string(value: str, name: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 2**15 - 1:
        raise ValueError(f"{name}: {len(data)} UTF-8 bytes, a Kafka STRING holds at most 32767")
    return _INT16.pack(len(data)) + data


class _StructParser:
    """Reads one struct's fields in order; every error names the record and field."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._at = 0
        self._what = what

    def _take(self, n: int, field: str) -> bytes:
        if self._at + n > len(self._data):
            left = len(self._data) - self._at
            raise ValueError(f"{self._what}: truncated at {field!r}: needs {n} bytes, {left} left")
        chunk = self._data[self._at : self._at + n]
        self._at += n
        return chunk

    def int16(self, field: str) -> int:
        return int(_INT16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_INT32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(_INT64.unpack(self._take(8, field))[0])

    def string(self, field: str) -> str:
        n = self.int16(field)
        if n < 0:
            raise ValueError(f"{self._what}: {field!r} has a negative length ({n})")
        try:
            return self._take(n, field).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self._what}: {field!r} is not UTF-8 ({exc.reason})") from exc

    def end(self) -> None:
        if self._at != len(self._data):
            extra = len(self._data) - self._at
            raise ValueError(f"{self._what}: {extra} unexpected bytes after the last field")


def _check(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is outside [{low}, {high}]")


@dataclass(frozen=True)
class OffsetSync:
    """``OffsetSync``: key ``topic`` STRING, ``partition`` INT32; value
    ``upstreamOffset`` INT64, ``offset`` INT64 (the downstream offset)."""

    #: The topic on the source cluster (not renamed).
    topic: str
    partition: int
    #: Offset of a record on the source cluster...
    upstream_offset: int
    #: ...and of its copy in the remote topic on the target cluster.
    downstream_offset: int

    def __post_init__(self) -> None:
        _check("partition", self.partition, 0, _INT32_MAX)
        _check("upstream offset", self.upstream_offset, 0, _INT64_MAX)
        _check("downstream offset", self.downstream_offset, 0, _INT64_MAX)

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) as MM2's ``OffsetSync.recordKey``/``recordValue``."""
        key = _string(self.topic, "topic") + _INT32.pack(self.partition)
        return key, _INT64.pack(self.upstream_offset) + _INT64.pack(self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k = _StructParser(key, "offset sync key")
        topic, partition = k.string("topic"), k.int32("partition")
        k.end()
        v = _StructParser(value, "offset sync value")
        upstream, downstream = v.int64("upstreamOffset"), v.int64("offset")
        v.end()
        try:
            return cls(topic, partition, upstream, downstream)
        except ValueError as exc:
            raise ValueError(f"offset sync: {exc}") from exc


@dataclass(frozen=True)
class Checkpoint:
    """``Checkpoint``: key ``group`` STRING, ``topic`` STRING, ``partition``
    INT32; value a header ``version`` INT16, then (version 0) ``upstreamOffset``
    INT64, ``offset`` INT64 (downstream), ``metadata`` STRING."""

    consumer_group: str
    #: The remote topic on the target cluster (MM2 renames it before writing).
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def __post_init__(self) -> None:
        _check("partition", self.partition, 0, _INT32_MAX)
        _check("upstream offset", self.upstream_offset, -(2**63), _INT64_MAX)
        _check("downstream offset", self.downstream_offset, -(2**63), _INT64_MAX)

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) as MM2's ``Checkpoint.recordKey``/``recordValue``."""
        key = (
            _string(self.consumer_group, "group")
            + _string(self.topic, "topic")
            + _INT32.pack(self.partition)
        )
        value = (
            _INT16.pack(CHECKPOINT_VERSION)
            + _INT64.pack(self.upstream_offset)
            + _INT64.pack(self.downstream_offset)
            + _string(self.metadata, "metadata")
        )
        return key, value

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k = _StructParser(key, "checkpoint key")
        group, topic, partition = k.string("group"), k.string("topic"), k.int32("partition")
        k.end()
        v = _StructParser(value, "checkpoint value")
        version = v.int16("version")
        if version != CHECKPOINT_VERSION:
            raise ValueError(
                f"checkpoint value: version {version} is unknown (only {CHECKPOINT_VERSION} is read)"
            )
        upstream, downstream = v.int64("upstreamOffset"), v.int64("offset")
        metadata = v.string("metadata")
        v.end()
        try:
            return cls(group, topic, partition, upstream, downstream, metadata)
        except ValueError as exc:
            raise ValueError(f"checkpoint: {exc}") from exc
