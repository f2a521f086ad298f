"""Assigning split ranges to Spark tasks (multikafka.coordinator.planning.assignment): big
ranges cut, more cuts up to the parallelism Spark has, small pieces grouped
into about that many tasks (without it, into tasks of at least
MIN_RECORDS_PER_TASK records)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multikafka.coordinator.planning.assignment import (
    MIN_RECORDS_PER_TASK,
    cut_ranges,
    group,
    piece_counts,
    plan_tasks,
)
from multikafka.core._ranges import SplitRange

INTERNALS = (
    "multikafka.coordinator.planning.assignment",
    "multikafka.core._ranges",
)


def R(cluster: str, start: int, until: int) -> SplitRange:
    """The range ``[start, until)`` of partition 0 of topic ``t`` of ``cluster``."""
    return SplitRange(cluster, "t", 0, start, until)


def coverage(ranges: list[SplitRange]) -> Counter[tuple[str, int]]:
    """How many times each (split, offset) record is read."""
    return Counter((r.split, o) for r in ranges for o in range(r.start, r.until))


def load(task: list[SplitRange]) -> int:
    return sum(r.size for r in task)


def random_ranges(rng: random.Random) -> list[SplitRange]:
    """Disjoint ranges; some continue the previous range of the same split."""
    out: list[SplitRange] = []
    for i in range(rng.randrange(0, 12)):
        size = rng.choice([0, 1, rng.randrange(1, 50), rng.randrange(1, 400)])
        if out and rng.random() < 0.3:
            prev = out[-1]
            out.append(prev._replace(start=prev.until, until=prev.until + size))
        else:
            start = rng.randrange(0, 1000)
            out.append(SplitRange(f"c{i % 3}", "t", i, start, start + size))
    rng.shuffle(out)
    return out


def expected_tasks(sizes: list[int], target: int, max_records: int) -> int:
    """How many tasks a plan has: one per range at least, enough for
    max_records, and at least the target while there are that many records."""
    at_least = sum(math.ceil(s / max_records) for s in sizes)
    return max(at_least, min(target, sum(sizes)))


# -- plan_tasks: examples ------------------------------------------------------------


def test_no_ranges_no_tasks() -> None:
    assert plan_tasks([]) == []


def test_empty_ranges_produce_no_tasks() -> None:
    assert plan_tasks([R("a", 5, 5), R("b", 0, 0)], min_partitions=4) == []


def test_empty_ranges_are_dropped_from_tasks() -> None:
    tasks = plan_tasks([R("a", 5, 5), R("b", 0, 3)])
    assert tasks == [[R("b", 0, 3)]]


def test_single_range_single_task() -> None:
    assert plan_tasks([R("a", 0, 100)]) == [[R("a", 0, 100)]]


def test_large_range_is_cut_to_max_records() -> None:
    tasks = plan_tasks([R("a", 0, 250)], max_records=100)
    assert tasks == [[R("a", 0, 84)], [R("a", 84, 167)], [R("a", 167, 250)]]


def test_min_partitions_splits_one_range() -> None:
    tasks = plan_tasks([R("a", 0, 100)], min_partitions=4)
    assert len(tasks) == 4
    assert [load(t) for t in tasks] == [25, 25, 25, 25]


def test_parallelism_splits_one_range() -> None:
    """A small batch of one split uses every core Spark has."""
    tasks = plan_tasks([R("a", 0, 100_000)], parallelism=2)
    assert tasks == [[R("a", 0, 50_000)], [R("a", 50_000, 100_000)]]


def test_a_large_batch_is_as_many_tasks_as_spark_runs_at_once_by_default() -> None:
    """No records-per-task limit unless a query sets one, as in Spark's Kafka
    source: a batch of 1,000,000 records over 8 splits on 2 cores is 2 tasks
    (a limit of 100,000 made it 16, in 8 waves of Python tasks)."""
    ranges = [R(c, 0, 125_000) for c in "abcdefgh"]
    tasks = plan_tasks(ranges, parallelism=2)
    assert [load(t) for t in tasks] == [500_000, 500_000]
    assert len(plan_tasks(ranges, parallelism=2, max_records=100_000)) == 16


def test_the_larger_of_parallelism_and_min_partitions_counts() -> None:
    assert len(plan_tasks([R("a", 0, 100)], parallelism=3, min_partitions=5)) == 5
    assert len(plan_tasks([R("a", 0, 100)], parallelism=6, min_partitions=5)) == 6


def test_min_partitions_above_record_count_gives_one_task_per_record() -> None:
    tasks = plan_tasks([R("a", 0, 3)], min_partitions=10)
    assert tasks == [[R("a", 0, 1)], [R("a", 1, 2)], [R("a", 2, 3)]]


def test_without_parallelism_large_ranges_get_a_task_each() -> None:
    """Without Spark's parallelism, like Spark's Kafka source: a split with
    at least MIN_RECORDS_PER_TASK records is a task of its own."""
    ranges = [SplitRange("c", "t", i, 0, MIN_RECORDS_PER_TASK) for i in range(10)]
    tasks = plan_tasks(ranges)
    assert tasks == [[r] for r in sorted(ranges)]


def test_without_parallelism_small_ranges_share_tasks() -> None:
    """A small micro-batch without Spark's parallelism (a query's first):
    tasks of MIN_RECORDS_PER_TASK records at least, not one per split (a
    Python task costs Spark ~20 ms)."""
    small = MIN_RECORDS_PER_TASK // 4
    ranges = [SplitRange("c", "t", i, 0, small) for i in range(8)]
    tasks = plan_tasks(ranges)
    assert [[r.split for r in t] for t in tasks] == [
        [f"c/t/{i}" for i in range(4)],
        [f"c/t/{i}" for i in range(4, 8)],
    ]
    # smaller than the minimum: one task; a smaller max_records still bounds it
    assert len(plan_tasks([r._replace(until=10) for r in ranges])) == 1
    assert len(plan_tasks([r._replace(until=10) for r in ranges], max_records=20)) == 4
    # minPartitions still asks for more
    assert len(plan_tasks(ranges, min_partitions=8)) == 8


def test_parallelism_below_the_split_count_cuts_nothing() -> None:
    ranges = [SplitRange("c", "t", i, 0, 10 * (i + 1)) for i in range(8)]
    tasks = plan_tasks(ranges, parallelism=4)
    assert [r for t in tasks for r in t] == sorted(ranges)  # whole ranges, grouped
    assert len(tasks) == 4


def test_more_cuts_go_to_the_larger_ranges() -> None:
    """Proportional: a range 3 times larger gets 3 times the pieces."""
    tasks = plan_tasks([R("big", 0, 300), R("small", 0, 100)], parallelism=4)
    assert [t[0] for t in tasks] == [
        R("big", 0, 100),
        R("big", 100, 200),
        R("big", 200, 300),
        R("small", 0, 100),
    ]


def test_contiguous_pieces_of_one_split_are_merged() -> None:
    # Adjacent input ranges of the same split come out as one range.
    tasks = plan_tasks([R("a", 0, 10), R("a", 10, 20), R("a", 20, 25)])
    assert tasks == [[R("a", 0, 25)]]


def test_non_contiguous_pieces_stay_apart() -> None:
    # Two tasks asked for: one per piece. Grouped (fewer tasks), they stay
    # two ranges of one task (the agent reads them in rounds).
    tasks = plan_tasks([R("a", 0, 10), R("a", 11, 20)], min_partitions=2)
    assert tasks == [[R("a", 0, 10)], [R("a", 11, 20)]]
    assert plan_tasks([R("a", 0, 10), R("a", 11, 20)]) == [[R("a", 0, 10), R("a", 11, 20)]]


def test_pieces_of_different_splits_are_different_tasks() -> None:
    tasks = plan_tasks([R("a", 0, 10), R("b", 10, 20)], min_partitions=2)
    assert tasks == [[R("a", 0, 10)], [R("b", 10, 20)]]


def test_output_is_deterministic_and_order_independent() -> None:
    ranges = [SplitRange("c", "t", i, i * 7, i * 7 + 13 * (i + 1)) for i in range(8)]
    first = plan_tasks(ranges, min_partitions=12, max_records=40)
    assert plan_tasks(ranges, min_partitions=12, max_records=40) == first
    assert plan_tasks(list(reversed(ranges)), min_partitions=12, max_records=40) == first


def test_accepts_any_iterable() -> None:
    tasks = plan_tasks(r for r in [R("a", 0, 4), R("b", 0, 4)])
    assert coverage([r for t in tasks for r in t]) == coverage([R("a", 0, 4), R("b", 0, 4)])


def test_no_task_exceeds_max_records_example() -> None:
    tasks = plan_tasks([R("a", 0, 7), R("b", 0, 17), R("c", 0, 6)], max_records=10)
    assert [load(t) for t in tasks] == [7, 9, 8, 6]


def test_piece_counts_cut_the_largest_pieces_first() -> None:
    sizes = np.array([1000, 10, 1], dtype=np.int64)
    assert piece_counts(sizes, max_records=10**6, target=3).tolist() == [1, 1, 1]
    assert piece_counts(sizes, max_records=10**6, target=5).tolist() == [3, 1, 1]
    # never more pieces than records
    assert piece_counts(sizes, max_records=10**6, target=10**6).tolist() == [1000, 10, 1]


def test_cut_ranges_on_arrays() -> None:
    pieces = cut_ranges(
        np.array([0, 100], dtype=np.int64),
        np.array([5, 110], dtype=np.int64),
        parallelism=4,
    )
    assert pieces.which.tolist() == [0, 0, 1, 1]
    assert pieces.start.tolist() == [0, 3, 100, 105]
    assert pieces.until.tolist() == [3, 5, 105, 110]


def test_more_splits_than_cores_share_tasks() -> None:
    """A small micro-batch over 8 splits on 2 cores: 2 tasks of 4 whole
    splits each (a task per split would queue behind the cores); without the
    parallelism, tasks of MIN_RECORDS_PER_TASK records at least (here one)."""
    ranges = [SplitRange("c", "t", i, 100, 150) for i in range(8)]
    two = plan_tasks(ranges, parallelism=2)
    assert [[r.split for r in t] for t in two] == [
        [f"c/t/{i}" for i in range(4)],
        [f"c/t/{i}" for i in range(4, 8)],
    ]
    assert all(r.size == 50 for t in two for r in t)
    assert len(plan_tasks(ranges)) == 1
    # minPartitions says more than the parallelism
    assert len(plan_tasks(ranges, parallelism=2, min_partitions=4)) == 4
    # the records per task still bound the size: 400 records, at most 100
    assert [load(t) for t in plan_tasks(ranges, parallelism=2, max_records=100)] == [100] * 4


def test_grouping_keeps_tasks_under_max_records() -> None:
    sizes = np.array([1, 100, 1], dtype=np.int64)
    task = group(sizes, tasks=2, max_records=100)
    assert np.bincount(task, weights=sizes).max() <= 100
    assert task.tolist() == [0, 1, 2]


# -- plan_tasks: properties over random range sets -------------------------------


def check_plan(
    ranges: list[SplitRange],
    tasks: list[list[SplitRange]],
    target: int,
    max_records: int,
    *,
    grouped: bool = False,
) -> None:
    """``grouped``: pieces beyond the target may share tasks (they always
    may, by the planner's rules; False checks a plan of one piece per task)."""
    # every record of every input range exactly once
    out = [r for t in tasks for r in t]
    assert coverage(out) == coverage(ranges)
    assert all(c == 1 for c in coverage(out).values())
    whole = [r for t in plan_tasks(ranges, max_records=10**18) for r in t]  # merged ranges
    if not whole:
        assert tasks == []
        return
    # no piece or task empty, none above max_records
    assert all(t and all(p.size > 0 for p in t) for t in tasks)
    assert max(load(t) for t in tasks) <= max_records
    # the pieces: enough for max_records, and the target while records allow
    pieces = expected_tasks([r.size for r in whole], target, max_records)
    assert len(out) == pieces
    if not grouped or pieces <= target:
        # one piece per task: at least one task per split with records
        assert all(len(t) == 1 for t in tasks)
        assert {t[0].split for t in tasks} == {r.split for r in whole}
    else:
        # consecutive pieces grouped into about the target, evenly
        total = sum(r.size for r in whole)
        biggest = max(p.size for p in out)
        assert len(tasks) <= max(target, -(-total // max_records)) + len(out)
        assert max(load(t) for t in tasks) <= -(-total // len(tasks)) + biggest
        assert [p for t in tasks for p in t] == sorted(out)
    # the pieces of a range are consecutive, in order, within one record of each other
    for r in whole:
        mine = [p for p in out if p.split == r.split and r.start <= p.start < r.until]
        assert mine[0].start == r.start
        assert mine[-1].until == r.until
        assert all(p.until == q.start for p, q in itertools.pairwise(mine))
        assert max(p.size for p in mine) - min(p.size for p in mine) <= 1


@pytest.mark.parametrize("seed", range(300))
def test_plan_tasks_properties(seed: int) -> None:
    rng = random.Random(seed)
    ranges = random_ranges(rng)
    min_partitions = rng.choice([0, 1, 2, 3, 8, 50])
    parallelism = rng.choice([0, 1, 2, 16])
    max_records = rng.choice([1, 7, 50, 100, 100_000])
    tasks = plan_tasks(
        ranges, min_partitions=min_partitions, max_records=max_records, parallelism=parallelism
    )
    check_plan(
        ranges,
        tasks,
        max(min_partitions, parallelism, 1),
        max_records,
        grouped=True,
    )
    again = plan_tasks(
        ranges, min_partitions=min_partitions, max_records=max_records, parallelism=parallelism
    )
    assert again == tasks


@given(
    st.lists(st.integers(1, 10_000), min_size=0, max_size=30),
    st.integers(0, 200),
    st.integers(0, 64),
    st.integers(1, 5_000),
)
def test_cut_ranges_property(
    sizes: list[int], min_partitions: int, parallelism: int, max_records: int
) -> None:
    """Every record of every range is in exactly one task; a task reads one
    consecutive piece of one range; pieces of a range differ by at most one
    record; the count follows the rules."""
    start = np.array([1000 * i for i in range(len(sizes))], dtype=np.int64)
    until = start + np.array(sizes, dtype=np.int64)
    pieces = cut_ranges(
        start,
        until,
        min_partitions=min_partitions,
        max_records=max_records,
        parallelism=parallelism,
    )
    which, a, b = pieces.which.tolist(), pieces.start.tolist(), pieces.until.tolist()
    # pieces tile each range in order, with no gap and no overlap
    for i, size in enumerate(sizes):
        mine = [(x, y) for w, x, y in zip(which, a, b, strict=True) if w == i]
        assert mine[0][0] == 1000 * i
        assert mine[-1][1] == 1000 * i + size
        assert all(p[1] == q[0] for p, q in itertools.pairwise(mine))
        lengths = [y - x for x, y in mine]
        assert min(lengths) >= 1
        assert max(lengths) - min(lengths) <= 1
        assert max(lengths) <= max_records
    assert which == sorted(which)
    target = max(min_partitions, parallelism, 1)
    assert len(which) == (expected_tasks(sizes, target, max_records) if sizes else 0)
    # tasks hold consecutive pieces, none above max_records
    task = pieces.task.tolist()
    assert task == sorted(task)
    assert set(task) == set(range(len(set(task))))
    if which:
        loads = np.bincount(pieces.task, weights=pieces.until - pieces.start)
        assert loads.max() <= max_records
    if len(which) <= target:
        assert task == list(range(len(which)))
    if parallelism == 0 and which:
        # without the parallelism: pieces of the minimum are tasks of their
        # own, and fewer records than it make one task (unless minPartitions)
        unit = min(MIN_RECORDS_PER_TASK, max_records)
        size = pieces.until - pieces.start
        if size.min() >= unit:
            assert task == list(range(len(which)))
        if int(size.sum()) <= unit and target == 1:
            assert set(task) == {0}
