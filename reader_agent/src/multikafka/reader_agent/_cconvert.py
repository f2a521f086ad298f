"""The compiled converter (``_convert.c``): loading it, checking
it reads confluent-kafka's ``Message`` right, and wrapping its buffers as
Arrow arrays. :mod:`multikafka.reader_agent._arrow` decides when to use it.

The extension is optional (``setup.py``: a failed build is skipped). It reads
a message either straight from confluent-kafka's C struct (``direct``: a few
nanoseconds per record, but it depends on the struct's layout) or through
the public accessor methods (``accessors``: layout-independent, slower).
``direct`` is used only after :func:`load` found the struct's size as
mirrored and the fields it reads of sample messages equal to what the
accessors return; and each batch still compares its first and last message.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

logger = logging.getLogger(__name__)


class Converted(NamedTuple):
    """One batch's columns as built by the extension."""

    key: pa.Array
    value: pa.Array
    topic: pa.Array
    partition: pa.Array
    offset: pa.Array
    #: int64 microseconds since the epoch (the caller gives it its timestamp type)
    timestamp_us: pa.Array
    timestamp_type: pa.Array
    #: distinct (topic, partition) pairs, first seen first
    pairs: list[tuple[str, int]]
    #: per record, the index of its pair
    codes: np.ndarray
    #: per pair, the index of its last record
    last: np.ndarray


def _binary(n: int, validity: bytes | None, nulls: int, offsets: bytes, data: bytes) -> pa.Array:
    buffers = [None if validity is None else pa.py_buffer(validity)]
    buffers += [pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def _fixed(type_: pa.DataType, n: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)], null_count=0)


@dataclass(frozen=True)
class CompiledConverter:
    """The extension, configured for confluent-kafka's ``Message``."""

    module: Any
    #: whether it reads the C struct (else it calls the accessors)
    direct: bool

    @property
    def name(self) -> str:
        return "c-direct" if self.direct else "c-accessors"

    def convert(self, msgs: list[Any]) -> Converted | None:
        """The columns of ``msgs``, or None when this batch needs the Python
        converter (an object that is not a ``Message``, a message without
        partition, offset or topic, over 2 GiB of keys or values)."""
        out = self.module.convert(msgs, self.direct)
        if out is None:
            return None
        (kvalid, knulls, koffs, kdata, vvalid, vnulls, voffs, vdata, topics, tcodes) = out[:10]
        (parts, offs, ts, tstypes, pairs, pcodes, plast) = out[10:]
        n = len(msgs)
        names = pa.array(topics, pa.string())
        return Converted(
            key=_binary(n, kvalid, knulls, koffs, kdata),
            value=_binary(n, vvalid, vnulls, voffs, vdata),
            # Built from the distinct names: no Python string per record.
            topic=names.take(_fixed(pa.int32(), n, tcodes)),
            partition=_fixed(pa.int32(), n, parts),
            offset=_fixed(pa.int64(), n, offs),
            timestamp_us=_fixed(pa.int64(), n, ts),
            timestamp_type=_fixed(pa.int32(), n, tstypes),
            pairs=pairs,
            codes=np.frombuffer(pcodes, np.int32),
            last=np.frombuffer(plast, np.int32),
        )


def _samples() -> list[Any]:
    """Messages whose every field the converter reads has a distinct value
    (needs a confluent-kafka that can construct a ``Message``)."""
    from confluent_kafka import Message

    return [
        Message(
            topic=f"t{i % 3}",
            partition=7 + i,
            offset=(1 << 40) + 3 * i,
            key=None if i == 2 else b"k" * i,
            value=None if i == 3 else bytes(range(i, i + 13)),
            timestamp=(1 + i % 2, 1_700_000_000_123 + 11 * i),
        )
        for i in range(6)
    ]


def _agrees(converter: CompiledConverter, msgs: list[Any]) -> bool:
    """Whether ``converter`` reads ``msgs`` as their accessors do."""
    got = converter.convert(msgs)
    if got is None:
        return False
    times = [m.timestamp() for m in msgs]
    return bool(
        got.key.to_pylist() == [m.key() for m in msgs]
        and got.value.to_pylist() == [m.value() for m in msgs]
        and got.topic.to_pylist() == [m.topic() for m in msgs]
        and got.partition.to_pylist() == [m.partition() for m in msgs]
        and got.offset.to_pylist() == [m.offset() for m in msgs]
        and got.timestamp_us.to_pylist() == [t * 1000 for _, t in times]
        and got.timestamp_type.to_pylist() == [k - 1 for k, _ in times]
    )


def _releases() -> str:
    """Which confluent-kafka is installed, and which ones ``multikafka-reader``
    requires: those its direct mode is verified on (empty when unknown)."""
    try:
        installed = metadata.version("confluent-kafka")
        required = metadata.requires("multikafka-reader") or []
    except metadata.PackageNotFoundError:
        return ""
    wanted = [r.split(";")[0] for r in required if r.startswith("confluent-kafka")]
    if not wanted:
        return ""
    return (
        f" (confluent-kafka {installed} is installed; multikafka-reader requires {wanted[0]},"
        " whose Message it reads directly)"
    )


def load() -> tuple[CompiledConverter | None, str]:
    """The compiled converter, direct if its checks pass; else the accessor
    mode; else None. Also says why it is not direct (empty if it is), and
    for the accessor mode which confluent-kafka releases would be direct."""
    try:
        from confluent_kafka import Message

        # By name: the compiled extension is no Python module the import
        # graph (make layers, the circle check) can see, which would take
        # it for the package itself.
        _convert = importlib.import_module("multikafka.reader_agent._convert")
    except ImportError as exc:
        return None, f"the C converter is not built ({exc})"
    getters = (
        Message.topic,
        Message.partition,
        Message.offset,
        Message.timestamp,
        Message.key,
        Message.value,
        Message.error,
    )
    _convert.configure(Message, getters)
    accessors = CompiledConverter(_convert, direct=False)
    try:
        samples = _samples()
    except TypeError as exc:  # a confluent-kafka that cannot build a Message
        return accessors, f"cannot build sample messages to check the layout ({exc}){_releases()}"
    if not _agrees(accessors, samples):
        return None, "the C converter's accessor mode misreads sample messages"
    why = _convert.check_layout()
    if why is not None:
        return accessors, why + _releases()
    direct = CompiledConverter(_convert, direct=True)
    if not _agrees(direct, samples):
        return accessors, (
            "reading the Message struct directly gives other values than its methods" + _releases()
        )
    return direct, ""
