"""The Arrow form of a read, in one place: the schema of Spark's Kafka source
plus ``cluster``, its Spark DDL, and converting Kafka messages into it column
by column (*conversion*, the converters; *decoding* is only what is done to
payloads afterwards, :mod:`multikafka.reader_agent._payloads`).

PySpark's Python data source refuses a batch whose schema does not equal
``to_arrow_schema(<declared DDL>, timezone="UTC")``, so the DDL, the Arrow
schema and the arrays built here must agree (``tests/unit/test_arrow_schema.py``).

Conversion is most of a Python worker's own CPU per record, so it has two
implementations that give equal columns: a compiled one
(``_convert.c``, see :mod:`multikafka.reader_agent._cconvert`) and a
Python one that every machine can run (``tests/unit/test_convert.py`` runs
both; ``docs/benchmarks.md`` has the numbers).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import methodcaller
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from confluent_kafka import Message as KafkaMessage

import multikafka.reader_agent._cconvert as _cconvert
from multikafka.core import env
from multikafka.core.logs import logger_of
from multikafka.reader_agent._cconvert import CompiledConverter

logger = logger_of(__name__)

#: Spark's Kafka source types of ``timestamp`` and ``headers``.
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

_BASE = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema([*_BASE, pa.field("cluster", pa.string())])
SCHEMA_WITH_HEADERS = pa.schema(
    [*_BASE, pa.field("headers", HEADERS_TYPE), pa.field("cluster", pa.string())]
)

#: The same schemas as Spark DDL.
_BASE_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
SPARK_DDL = f"{_BASE_DDL}, cluster string"
SPARK_DDL_WITH_HEADERS = (
    f"{_BASE_DDL}, headers array<struct<key: string, value: binary>>, cluster string"
)


class Message(Protocol):
    """What conversion reads of a ``confluent_kafka.Message``. Both converters
    are fastest on the real class; other objects go through the methods."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...


#: Distinct ``(topic, partition)`` pairs of a batch, and per record the index
#: of its pair in that list.
PartitionIndex = tuple[list[tuple[str, int]], np.ndarray]


@dataclass
class Columns:
    """Converted records of one batch, column-wise (Spark's Kafka schema)."""

    key: pa.Array
    value: pa.Array
    topic: pa.Array
    partition: pa.Array
    offset: pa.Array
    timestamp: pa.Array
    timestamp_type: pa.Array
    headers: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def filter(self, keep: np.ndarray) -> Columns:
        """The records whose entry in the boolean mask ``keep`` is true."""
        mask = pa.array(keep)
        return Columns(
            key=self.key.filter(mask),
            value=self.value.filter(mask),
            topic=self.topic.filter(mask),
            partition=self.partition.filter(mask),
            offset=self.offset.filter(mask),
            timestamp=self.timestamp.filter(mask),
            timestamp_type=self.timestamp_type.filter(mask),
            headers=self.headers.filter(mask) if self.headers is not None else None,
        )

    def partitions(self) -> PartitionIndex:
        """The batch's distinct partitions and each record's partition, computed
        on the arrays (no per-record Python work)."""
        topics = self.topic.dictionary_encode()
        names = topics.dictionary.to_pylist()
        keys = (topics.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32) | (
            self.partition.to_numpy(zero_copy_only=False).astype(np.int64)
        )
        unique, codes = np.unique(keys, return_inverse=True)
        pairs = [(str(names[int(k) >> 32]), int(k) & 0xFFFFFFFF) for k in unique]
        return pairs, codes

    def last_per_partition(self, index: PartitionIndex) -> dict[tuple[str, int], tuple[int, int]]:
        """``(offset, record time in ms)`` of the last record of each partition."""
        pairs, codes = index
        if not len(codes):
            return {}
        # The first occurrence of each code in the reversed batch is its last record.
        present, first_rev = np.unique(codes[::-1], return_index=True)
        return self._last_records(pairs, present, len(codes) - 1 - first_rev)

    def _last_records(
        self, pairs: list[tuple[str, int]], present: Iterable[int], last: np.ndarray
    ) -> dict[tuple[str, int], tuple[int, int]]:
        rows = pa.array(np.asarray(last, np.int64))
        offsets = self.offset.take(rows).to_pylist()
        times_us = self.timestamp.take(rows).cast(pa.int64()).to_pylist()
        return {
            pairs[int(c)]: (offset, time_us // 1000)
            for c, offset, time_us in zip(present, offsets, times_us, strict=True)
        }


class _IndexedColumns(Columns):
    """Columns whose converter also found :meth:`partitions` and each
    partition's last record on the way. Not a dataclass of its own, so
    ``dataclasses.fields`` and ``filter`` (which builds plain ``Columns``)
    never carry an index that no longer matches the rows."""

    def __init__(
        self,
        *args: Any,
        index: PartitionIndex | None = None,
        last: np.ndarray | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._index = index
        self._last = last

    def partitions(self) -> PartitionIndex:
        return self._index if self._index is not None else super().partitions()

    def last_per_partition(self, index: PartitionIndex) -> dict[tuple[str, int], tuple[int, int]]:
        pairs, codes = index
        if self._index is None or self._last is None or codes is not self._index[1]:
            return super().last_per_partition(index)
        return self._last_records(pairs, range(len(pairs)), self._last)


#: The converters :func:`convert` can use; ``MULTIKAFKA_CONVERTER`` picks one.
CONVERTERS = ("auto", "python", "c", "c-accessors")


def convert(
    msgs: Sequence[Message], *, include_headers: bool, converter: str | None = None
) -> Columns:
    """Kafka messages (without errors) as Arrow columns.

    ``converter`` (default: ``MULTIKAFKA_CONVERTER``, else ``auto``) is one of
    :data:`CONVERTERS`: ``auto`` reads confluent-kafka's struct with the
    compiled converter when it is built and its layout checks passed, else
    goes through the accessor methods with it (still about half the Python
    converter's CPU), else converts in Python; ``python``; ``c``, the
    compiled converter (an error if it
    is not built), through the accessors if the layout checks failed;
    ``c-accessors``, the compiled converter through the accessors only. A batch
    the compiled converter cannot take (see :meth:`CompiledConverter.convert`) is
    converted in Python."""
    compiled = _compiled(converter or _configured())
    if compiled is not None and isinstance(msgs, list):
        got = compiled.convert(msgs)
        if got is not None:
            return _IndexedColumns(
                key=got.key,
                value=got.value,
                topic=got.topic,
                partition=got.partition,
                offset=got.offset,
                timestamp=got.timestamp_us.view(TIMESTAMP_TYPE),
                timestamp_type=got.timestamp_type,
                headers=_headers(msgs) if include_headers else None,
                index=(got.pairs, got.codes),
                last=got.last,
            )
    return convert_python(msgs, include_headers=include_headers)


def active_converter(converter: str | None = None) -> str:
    """What :func:`convert` uses for ``converter`` (default: the environment):
    ``python``, ``c-direct`` or ``c-accessors``."""
    compiled = _compiled(converter or _configured())
    return "python" if compiled is None else compiled.name


def _configured() -> str:
    """The converter the environment names (``MULTIKAFKA_CONVERTER``, or
    its earlier name ``MULTIKAFKA_DECODER``), else ``auto``."""
    return env.get(env.CONVERTER) or env.get(env.CONVERTER_EARLIER) or "auto"


def _compiled(name: str) -> CompiledConverter | None:
    if name not in CONVERTERS:
        raise ValueError(f"{env.CONVERTER}={name!r}: expected one of {', '.join(CONVERTERS)}")
    if name == "python":
        return None
    found, why = _load_compiled()
    if found is None:
        if name != "auto":
            raise RuntimeError(
                f"{env.CONVERTER}={name}: {why} (installing multikafka-reader with a C "
                "compiler and the Python headers builds it)"
            )
        return None
    if name == "c-accessors" and found.direct:
        return _accessors_only(found)
    return found


@functools.cache
def _load_compiled() -> tuple[CompiledConverter | None, str]:
    found, why = _cconvert.load()
    if why:
        logger.warning(
            "compiled converter: %s", why, extra={"converter": found.name if found else "python"}
        )
    return found, why


@functools.cache
def _accessors_only(found: CompiledConverter) -> CompiledConverter:
    return dataclasses.replace(found, direct=False)


def _headers(msgs: Sequence[Message]) -> pa.Array:
    return pa.array([m.headers() for m in msgs], HEADERS_TYPE)


def convert_python(msgs: Sequence[Message], *, include_headers: bool) -> Columns:
    """The Python converter: one pass per field, through confluent-kafka's
    unbound accessors (``map(Message.value, msgs)`` calls the C method with no
    Python frame per record), numbers straight into numpy arrays."""
    try:
        return _convert_fields(msgs, include_headers, _ACCESSORS)
    except TypeError:  # not confluent_kafka Messages (the descriptors check)
        return _convert_fields(msgs, include_headers, _CALLERS)


def _convert_fields(
    msgs: Sequence[Message], include_headers: bool, get: dict[str, Callable[[Any], Any]]
) -> Columns:
    n = len(msgs)
    # (type, time) pairs flattened into one int64 array, without a tuple per row
    ts = np.fromiter(chain.from_iterable(map(get["timestamp"], msgs)), np.int64, 2 * n)
    ts = ts.reshape(n, 2)
    return Columns(
        key=pa.array(list(map(get["key"], msgs)), pa.binary()),
        value=pa.array(list(map(get["value"], msgs)), pa.binary()),
        topic=pa.array(list(map(get["topic"], msgs)), pa.string()),
        partition=_ints(map(get["partition"], msgs), n, np.int32),
        offset=_ints(map(get["offset"], msgs), n, np.int64),
        timestamp=pa.array(ts[:, 1] * 1000).view(TIMESTAMP_TYPE),
        # librdkafka: 0 none, 1 create, 2 append; Kafka/Spark: -1, 0, 1.
        timestamp_type=pa.array((ts[:, 0] - 1).astype(np.int32)),
        headers=pa.array(list(map(get["headers"], msgs)), HEADERS_TYPE)
        if include_headers
        else None,
    )


def _ints(values: Iterable[int | None], n: int, dtype: type[np.integer[Any]]) -> pa.Array:
    """An integer array; nulls (a message without partition or offset) are
    rare and take the slow path."""
    values = list(values)
    try:
        return pa.array(np.fromiter(values, dtype, n))
    except TypeError:
        return pa.array(values, pa.from_numpy_dtype(dtype))


_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
#: confluent_kafka.Message's method descriptors: a C call per record.
_ACCESSORS: dict[str, Callable[[Any], Any]] = {f: getattr(KafkaMessage, f) for f in _FIELDS}
#: The same for any object with these methods (slower: a lookup per call).
_CALLERS: dict[str, Callable[[Any], Any]] = {f: methodcaller(f) for f in _FIELDS}


def record_batch(cols: Columns, cluster: str, *, include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch from converted columns; the cluster column is built
    without touching individual records."""
    n = len(cols)
    cluster_col = pa.array([cluster], pa.string()).take(pa.array(np.zeros(n, np.int32)))
    arrays = [
        cols.key,
        cols.value,
        cols.topic,
        cols.partition,
        cols.offset,
        cols.timestamp,
        cols.timestamp_type,
    ]
    if include_headers:
        if cols.headers is None:
            raise ValueError("headers were not converted")
        return pa.RecordBatch.from_arrays(
            [*arrays, cols.headers, cluster_col], schema=SCHEMA_WITH_HEADERS
        )
    return pa.RecordBatch.from_arrays([*arrays, cluster_col], schema=SCHEMA)
