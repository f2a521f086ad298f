"""The read-path options of issue 8, part 3, measured on real messages.

``python -m benchmarks.read_rate`` calls :func:`measure_options` once the
stream is produced: it consumes up to ``records`` messages into memory (the
product's fetch settings and batch size, garbage collector paused as the
product pauses it) and then, alternating, ``repeat`` times each, times what
each option costs a Python worker per batch: conversion, the range bookkeeping
(:meth:`Columns.partitions`, :meth:`Columns.last_per_partition`) and the
``RecordBatch`` handed to Spark. CPU time of this thread only (no librdkafka
thread runs meanwhile: the messages are already consumed).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from benchmarks._common import plain_consumer, summary
from multikafka.reader_agent import arrow
from multikafka.reader_agent.arrow import HEADERS_TYPE, TIMESTAMP_TYPE, Columns

Batches = list[list[Message]]


def consume(bootstrap: str, topic: str, partitions: int, records: int, batch: int) -> Batches:
    """Up to ``records`` messages of ``topic`` in the batches ``consume`` gave."""
    from confluent_kafka import TopicPartition

    consumer = plain_consumer(bootstrap, "bench-convert-options")
    out: Batches = []
    got = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        empty = 0
        while got < records and empty < 10:
            msgs = consumer.consume(min(batch, records - got), timeout=0.5)
            good = [m for m in msgs if m.error() is None]
            empty = 0 if good else empty + 1
            if good:
                out.append(good)
                got += len(good)
    finally:
        consumer.close()
    return out


def convert_before(msgs: Sequence[Message], *, include_headers: bool) -> Columns:
    """The converter as it was before issue 8 (commit 29338c5), for reference:
    a list comprehension per field, timestamps through a list of tuples."""
    ts = np.array([m.timestamp() for m in msgs], np.int64).reshape(-1, 2)
    return Columns(
        key=pa.array([m.key() for m in msgs], pa.binary()),
        value=pa.array([m.value() for m in msgs], pa.binary()),
        topic=pa.array([m.topic() for m in msgs], pa.string()),
        partition=pa.array([m.partition() for m in msgs], pa.int32()),
        offset=pa.array(np.array([m.offset() for m in msgs], np.int64)),
        timestamp=pa.array(ts[:, 1] * 1000).cast(TIMESTAMP_TYPE),
        timestamp_type=pa.array((ts[:, 0] - 1).astype(np.int32)),
        headers=pa.array([m.headers() for m in msgs], HEADERS_TYPE) if include_headers else None,
    )


def convert_pruned(msgs: Sequence[Message], *, include_headers: bool) -> Columns:
    """The Python converter without the column a query reading only ``value``
    would not need: the key (the timestamp type is free: it comes in the
    timestamp's tuple). topic, partition, offset and timestamp stay: the
    range bookkeeping and the read marks need them."""
    n = len(msgs)
    ts = np.fromiter(chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n)
    ts = ts.reshape(n, 2)
    return Columns(
        key=pa.nulls(n, pa.binary()),
        value=pa.array(list(map(Message.value, msgs)), pa.binary()),
        topic=pa.array(list(map(Message.topic, msgs)), pa.string()),
        partition=pa.array(np.fromiter(map(Message.partition, msgs), np.int32, n)),
        offset=pa.array(np.fromiter(map(Message.offset, msgs), np.int64, n)),
        timestamp=pa.array(ts[:, 1] * 1000).view(TIMESTAMP_TYPE),
        timestamp_type=pa.array((ts[:, 0] - 1).astype(np.int32)),
    )


def _with_converter(name: str, headers: bool = False) -> Callable[[list[Message]], Columns]:
    return lambda msgs: arrow.convert(msgs, include_headers=headers, converter=name)


#: option -> (what it is, how a batch is converted). Every option then runs
#: the same bookkeeping and builds the same RecordBatch.
OPTIONS: dict[str, tuple[str, Callable[[list[Message]], Columns]]] = {
    "before": (
        "converter before issue 8: comprehensions, timestamps via tuples",
        lambda msgs: convert_before(msgs, include_headers=False),
    ),
    "python": (
        "Python converter: unbound accessors, numpy from iterators",
        _with_converter("python"),
    ),
    "python_pruned": (
        "same, skipping the key (what column pruning could save)",
        lambda msgs: convert_pruned(msgs, include_headers=False),
    ),
    "python_headers": ("Python converter, includeHeaders=true", _with_converter("python", True)),
    "c_accessors": ("C extension calling the accessor methods", _with_converter("c-accessors")),
    "c_direct": ("C extension reading the Message struct", _with_converter("c")),
    "c_direct_headers": ("same, includeHeaders=true", _with_converter("c", True)),
}


def _step(convert: Callable[[list[Message]], Columns], msgs: list[Message]) -> pa.RecordBatch:
    cols = convert(msgs)
    index = cols.partitions()
    cols.last_per_partition(index)
    return arrow.record_batch(cols, "east", include_headers=cols.headers is not None)


def _ipc_write(batches: list[pa.RecordBatch], sink: pa.Buffer) -> None:
    """Write ``batches`` as an Arrow stream into ``sink`` (memory allocated
    beforehand, as a socket's buffer would be), as pyspark sends them to the JVM."""
    with pa.ipc.new_stream(pa.FixedSizeBufferWriter(sink), batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)


def _ipc_size(batches: list[pa.RecordBatch]) -> int:
    stream = pa.MockOutputStream()
    with pa.ipc.new_stream(stream, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)
    return int(stream.size())


def measure_options(
    batches: Batches, repeat: int, on_step: Callable[[], None] | None = None
) -> dict[str, Any]:
    """CPU seconds per million records of each option (median [min-max]),
    plus two costs no option removes: copying the value bytes into Arrow
    (what zero-copy could save at most) and writing the batches as the
    Arrow stream pyspark sends to the JVM."""
    records = sum(len(b) for b in batches)
    available = {k: v for k, v in OPTIONS.items() if k.startswith(("before", "python"))}
    if arrow.active_converter("auto") != "python":
        available = OPTIONS
    per: dict[str, list[float]] = {k: [] for k in [*available, "value_copy", "arrow_ipc"]}
    was = gc.isenabled()
    gc.disable()  # as the product converts: collector paused
    try:
        rbs: list[pa.RecordBatch] = []
        for _, convert in available.values():  # warm-up: allocator, caches
            rbs = [_step(convert, msgs) for msgs in batches]
        sink = pa.allocate_buffer(_ipc_size(rbs))
        for _ in range(repeat):
            for name, (_, convert) in available.items():
                t0 = time.thread_time()
                for msgs in batches:
                    _step(convert, msgs)
                per[name].append(time.thread_time() - t0)
                if on_step:
                    on_step()
            values = [rb.column("value").buffers()[2] for rb in rbs]
            t0 = time.thread_time()
            for buf in values:
                np.frombuffer(buf, np.uint8).copy()
            per["value_copy"].append(time.thread_time() - t0)
            t0 = time.thread_time()
            _ipc_write(rbs, sink)
            per["arrow_ipc"].append(time.thread_time() - t0)
    finally:
        if was:
            gc.enable()
    scale = 1_000_000 / records
    return {
        "records": records,
        "batches": len(batches),
        "what": {k: v[0] for k, v in available.items()}
        | {
            "value_copy": "copying the value bytes into an Arrow buffer (the copy zero-copy would save)",
            "arrow_ipc": "writing the batches as an Arrow stream (pyspark's part, any converter)",
        },
        "cpu_s_per_million": {k: summary([v * scale for v in vs]) for k, vs in per.items()},
        "runs": {k: [v * scale for v in vs] for k, vs in per.items()},
    }
