"""Assigning split ranges to Spark tasks: as many tasks as Spark runs at
once, like Spark's own Kafka source (``KafkaOffsetRangeCalculator``) sizes
its tasks by the Kafka partitions:

* a range of more than ``max_records`` records is cut into equal
  consecutive pieces of at most that many;
* the target is the parallelism Spark has (what :func:`multikafka.spark.register`
  passes on, or else what the query's reader agents reported from their
  tasks' Spark configuration: :mod:`multikafka.coordinator.agents.task_slots`),
  or ``minPartitions`` if larger. While there are fewer pieces than the target, ranges are cut
  further: the next cut goes to the range whose pieces are largest (so the
  pieces end up in proportion to the ranges' sizes, and as even as they can
  be), never into pieces of 0 records, so there are ``min(target, records)``
  tasks at least;
* with more pieces than the target, consecutive pieces are grouped into
  ``max(target, ceil(records / max_records))`` tasks of about equal size
  (:func:`group`): a task per piece would wait for a core and pay a Python
  task's fixed cost each (about 20 ms here), which a small micro-batch feels;
* without a known parallelism (a query's first micro-batch, before its
  agents reported it), pieces are grouped the same way into tasks of at least
  :data:`MIN_RECORDS_PER_TASK` records (or ``max_records`` if smaller): a
  piece that large is its own task (one per split with that many records,
  as Spark's Kafka source plans), small ones share tasks.

:func:`cut_ranges` works on arrays (a micro-batch may have 100,000 ranges);
:func:`plan_tasks` is the same on :class:`~multikafka.core._ranges.SplitRange` tuples. Tasks come in the
order of their ranges, pieces of a range in offset order: deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from multikafka.core._offsets import I64
from multikafka.core._ranges import DEFAULT_MAX_RECORDS_PER_TASK, SplitRange

#: Without Spark's parallelism, no task gets fewer records than this when
#: pieces can be grouped: a Python task's fixed cost (about 20 ms) stays
#: small beside its read (about 10,000 records take 60-120 ms on a core).
MIN_RECORDS_PER_TASK = 10_000


class Pieces(NamedTuple):
    """The tasks of a plan: piece ``i`` reads ``[start[i], until[i])`` of the
    range ``which[i]`` in task ``task[i]`` (non-decreasing: a task's pieces
    are consecutive)."""

    which: I64
    start: I64
    until: I64
    task: I64

    def task_sizes(self) -> I64:
        """How many pieces each task holds."""
        return np.bincount(self.task) if len(self.task) else self.task

    def by_task(self) -> list[list[tuple[int, int, int]]]:
        """``(which, start, until)`` of each piece, per task."""
        tasks: list[list[tuple[int, int, int]]] = [[] for _ in range(len(self.task_sizes()))]
        for i, a, b, t in zip(
            self.which.tolist(),
            self.start.tolist(),
            self.until.tolist(),
            self.task.tolist(),
            strict=True,
        ):
            tasks[t].append((i, a, b))
        return tasks


def group(sizes: I64, *, tasks: int, max_records: int) -> I64:
    """The task of each piece when ``sizes`` (in tape order) go into about
    ``tasks`` tasks of consecutive pieces with about equal records each (a
    piece goes where its middle falls), and no task above ``max_records``
    when pieces are at most that big. Consecutive pieces are mostly of one
    cluster and topic, so a task uses few consumers."""
    total = int(sizes.sum())
    middle = np.cumsum(sizes) - sizes / 2
    n = max(tasks, 1)
    while True:
        if n >= len(sizes):
            return np.arange(len(sizes), dtype=np.int64)
        slot = np.minimum((middle * n / total).astype(np.int64), n - 1)
        # renumber: no empty task in between
        task = np.cumsum(np.concatenate(([0], np.diff(slot) > 0)))
        largest = int(np.bincount(task, weights=sizes).max())
        if largest <= max_records:
            return task.astype(np.int64)
        n += 1


def piece_counts(sizes: I64, *, max_records: int, target: int) -> I64:
    """How many pieces each range (all of them non-empty) is cut into."""
    counts = -(-sizes // max_records)
    want = min(target, int(sizes.sum())) - int(counts.sum())
    if want <= 0:
        return counts
    # Few tasks (fewer than the parallelism): cut the largest pieces further.
    size, k = sizes.tolist(), counts.tolist()
    heap = [(-s / c, i) for i, (s, c) in enumerate(zip(size, k, strict=True)) if s > c]
    heapq.heapify(heap)
    for _ in range(want):
        _, i = heapq.heappop(heap)
        k[i] += 1
        if size[i] > k[i]:
            heapq.heappush(heap, (-size[i] / k[i], i))
    return np.array(k, dtype=np.int64)


def cut_ranges(
    start: I64,
    until: I64,
    *,
    min_partitions: int = 0,
    max_records: int = DEFAULT_MAX_RECORDS_PER_TASK,
    parallelism: int = 0,
) -> Pieces:
    """The tasks of ranges ``[start[i], until[i])`` (all non-empty, each of a
    different split, in the order wanted): see the module docstring."""
    sizes = until - start
    if not len(sizes):
        return Pieces(sizes, sizes, sizes, sizes)
    max_records = max(max_records, 1)
    target = max(parallelism, min_partitions, 1)
    counts = piece_counts(sizes, max_records=max_records, target=target)
    index = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
    # j-th piece of a range of `size` records in `k` pieces: the first
    # size % k pieces hold one record more than the others.
    j = np.arange(len(index), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    q, r = np.divmod(sizes, counts)
    q, r = q[index], r[index]
    first = start[index] + j * q + np.minimum(j, r)
    last = first + q + (j < r)
    if len(index) > target:
        # More pieces than Spark runs at once: a task per piece would queue
        # up behind the cores, each paying a Python task's fixed cost. Not
        # knowing the cores, tasks of at least MIN_RECORDS_PER_TASK.
        unit = max_records if parallelism > 0 else min(MIN_RECORDS_PER_TASK, max_records)
        tasks = max(target, -(-int(sizes.sum()) // unit))
        task = group(last - first, tasks=tasks, max_records=max_records)
    else:
        task = np.arange(len(index), dtype=np.int64)
    return Pieces(index, first, last, task)


def plan_tasks(
    ranges: Iterable[SplitRange],
    *,
    min_partitions: int = 0,
    max_records: int = DEFAULT_MAX_RECORDS_PER_TASK,
    parallelism: int = 0,
) -> list[list[SplitRange]]:
    """Tasks of ``ranges`` (sorted first; empty ones dropped, contiguous
    ranges of one split joined); each task holds one range."""
    tape = _merge(sorted(r for r in ranges if r.size > 0))
    pieces = cut_ranges(
        np.array([r.start for r in tape], dtype=np.int64),
        np.array([r.until for r in tape], dtype=np.int64),
        min_partitions=min_partitions,
        max_records=max_records,
        parallelism=parallelism,
    )
    return [[tape[i]._replace(start=a, until=b) for i, a, b in task] for task in pieces.by_task()]


def _merge(ranges: list[SplitRange]) -> list[SplitRange]:
    """Sorted ranges with contiguous ranges of the same split joined."""
    out: list[SplitRange] = []
    for r in ranges:
        if out and out[-1][:3] == r[:3] and out[-1].until == r.start:
            out[-1] = out[-1]._replace(until=r.until)
        else:
            out.append(r)
    return out
