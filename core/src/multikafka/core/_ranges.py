"""A range of one split, the one form it has from the planner to the agent:
:class:`SplitRange` in Python, ``RangeColumns`` on the wire (a plan may hold
100,000 ranges: columns of packed numbers, not a message per range).

The coordinator plans ranges as arrays and writes their columns straight
from them (:func:`columns`); clients turn columns into tasks of
:class:`SplitRange` (:func:`tasks_of`); agents report the ranges they gave up
in the same form (:func:`to_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import NamedTuple

import numpy as np

from multikafka.core._offsets import I64, check_name
from multikafka.core.exceptions import ValidationError
from multikafka.v1 import common_pb2


class SplitRange(NamedTuple):
    """``[start, until)`` of partition ``partition`` of ``topic`` in ``cluster``."""

    cluster: str
    topic: str
    partition: int
    start: int
    until: int

    @property
    def split(self) -> str:
        """The split's id, ``cluster/topic/partition``."""
        return f"{self.cluster}/{self.topic}/{self.partition}"

    @property
    def size(self) -> int:
        return self.until - self.start


#: Records a task reads at most unless a query says otherwise (Spark's
#: ``maxRecordsPerPartition``): the planner's default and the options'. No
#: limit, as Spark's Kafka source has none: a micro-batch gets as many tasks
#: as Spark runs at once, however large. A limit of 100,000 made a batch of
#: 1,000,000 records 16 tasks on 2 cores: 1.8x slower, with 1.7x the
#: workers' CPU per record (docs/benchmarks.md, Small micro-batches). A task
#: hands its records to Spark as it reads them, so its size bounds no memory.
DEFAULT_MAX_RECORDS_PER_TASK = 2**62

#: The tasks of a plan: each a tuple of the ranges it reads.
Tasks = list[tuple[SplitRange, ...]]


def columns(
    groups: Sequence[tuple[str, str]],
    group: I64,
    partitions: I64,
    start: I64,
    until: I64,
    task_ranges: I64 | None = None,
) -> common_pb2.RangeColumns:
    """Ranges given as arrays (range ``i`` reads ``[start[i], until[i])`` of
    ``partitions[i]`` of ``groups[group[i]]``), and, for a plan, how many
    ranges each task reads, as columns."""
    msg = common_pb2.RangeColumns(clusters=[c for c, _ in groups], topics=[t for _, t in groups])
    msg.groups.extend(np.asarray(group).tolist())
    msg.partitions.extend(np.asarray(partitions).tolist())
    msg.from_offsets.extend(np.asarray(start).tolist())
    msg.until_offsets.extend(np.asarray(until).tolist())
    if task_ranges is not None:
        msg.task_ranges.extend(np.asarray(task_ranges).tolist())
    return msg


def to_columns(ranges: Iterable[SplitRange]) -> common_pb2.RangeColumns:
    """``ranges`` (no task grouping) as columns."""
    index: dict[tuple[str, str], int] = {}
    msg = common_pb2.RangeColumns()
    for r in ranges:
        msg.groups.append(index.setdefault((r.cluster, r.topic), len(index)))
        msg.partitions.append(r.partition)
        msg.from_offsets.append(r.start)
        msg.until_offsets.append(r.until)
    msg.clusters.extend(c for c, _ in index)
    msg.topics.extend(t for _, t in index)
    return msg


def from_columns(msg: common_pb2.RangeColumns, field: str = "ranges") -> list[SplitRange]:
    """Every range of ``msg``, checked: what a peer sent may be malformed
    (:class:`ValidationError` naming the part, e.g. ``abandoned.groups[3]``).
    Checked on the arrays and made in one pass: a plan may hold 100,000."""
    n = len(msg.groups)
    if not len(msg.clusters) == len(msg.topics):
        raise ValidationError(field, "clusters and topics must have the same length")
    if not n == len(msg.partitions) == len(msg.from_offsets) == len(msg.until_offsets):
        raise ValidationError(
            field, "groups, partitions, from_offsets and until_offsets must have the same length"
        )
    clusters = [
        check_name(c, "cluster", f"{field}.clusters[{i}]") for i, c in enumerate(msg.clusters)
    ]
    topics = [check_name(t, "topic", f"{field}.topics[{i}]") for i, t in enumerate(msg.topics)]
    if not n:  # most reports give up nothing: no arrays to make
        return []
    group = np.array(msg.groups, dtype=np.int64)
    partitions = np.array(msg.partitions, dtype=np.int64)
    start = np.array(msg.from_offsets, dtype=np.int64)
    until = np.array(msg.until_offsets, dtype=np.int64)
    for i in np.flatnonzero(group >= len(clusters))[:1].tolist():
        raise ValidationError(
            f"{field}.groups[{i}]", f"no group {group[i]}: there are {len(clusters)}"
        )
    for i in np.flatnonzero(partitions < 0)[:1].tolist():
        raise ValidationError(f"{field}.partitions[{i}]", f"must be >= 0, got {partitions[i]}")
    for i in np.flatnonzero((start < 0) | (until < start))[:1].tolist():
        raise ValidationError(
            f"{field}[{i}]",
            f"needs 0 <= from_offset <= until_offset, got [{start[i]}, {until[i]})",
        )
    names = (
        np.array(clusters, dtype=object)[group].tolist(),
        np.array(topics, dtype=object)[group].tolist(),
    )
    return list(
        map(
            SplitRange._make,
            zip(*names, partitions.tolist(), start.tolist(), until.tolist(), strict=True),
        )
    )


def tasks_of(msg: common_pb2.RangeColumns, field: str = "tasks") -> Tasks:
    """The tasks of a plan's columns, each a tuple of its ranges."""
    ranges = from_columns(msg, field)
    sizes = np.array(msg.task_ranges, dtype=np.int64)
    if int(sizes.sum()) != len(ranges) or (sizes < 1).any():
        raise ValidationError(field, "task_ranges must be >= 1 and add up to the number of ranges")
    if len(sizes) == len(ranges):  # a task per range: a large plan's usual shape
        return [(r,) for r in ranges]
    it = iter(ranges)
    return [tuple(islice(it, n)) for n in sizes.tolist()]
