"""Assigning split ranges to Spark tasks (coordinator.assignment)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from coordinator.assignment import Range, cut, plan_tasks


def coverage(ranges: list[Range]) -> Counter[tuple[str, int]]:
    """How many times each (split, offset) record is read."""
    return Counter((r.split, o) for r in ranges for o in range(r.start, r.until))


def load(task: list[Range]) -> int:
    return sum(r.size for r in task)


def random_ranges(rng: random.Random) -> list[Range]:
    """Disjoint ranges; some continue the previous range of the same split."""
    out: list[Range] = []
    for i in range(rng.randrange(0, 12)):
        size = rng.choice([0, 1, rng.randrange(1, 50), rng.randrange(1, 400)])
        if out and rng.random() < 0.3:
            prev = out[-1]
            out.append(Range(prev.split, prev.until, prev.until + size))
        else:
            start = rng.randrange(0, 1000)
            out.append(Range(f"c{i % 3}/t/{i}", start, start + size))
    rng.shuffle(out)
    return out


def expected_tasks(total: int, min_partitions: int, max_records: int) -> int:
    """How many tasks a plan has: enough for max_records, at least
    min_partitions, never more than one per record."""
    return min(total, max(min_partitions, math.ceil(total / max_records), 1))


# -- cut --------------------------------------------------------------------------


def test_cut_in_pieces() -> None:
    assert cut(Range("s", 10, 20), 4) == [
        Range("s", 10, 14),
        Range("s", 14, 18),
        Range("s", 18, 20),
    ]
    assert cut(Range("s", 10, 20), 10) == [Range("s", 10, 20)]
    assert cut(Range("s", 10, 20), 100) == [Range("s", 10, 20)]
    assert cut(Range("s", 5, 5), 3) == []


def test_range_size() -> None:
    assert Range("s", 3, 10).size == 7
    assert Range("s", 3, 3).size == 0


# -- plan_tasks: examples ------------------------------------------------------------


def test_no_ranges_no_tasks() -> None:
    assert plan_tasks([]) == []


def test_empty_ranges_produce_no_tasks() -> None:
    assert plan_tasks([Range("a", 5, 5), Range("b", 0, 0)], min_partitions=4) == []


def test_empty_ranges_are_dropped_from_tasks() -> None:
    tasks = plan_tasks([Range("a", 5, 5), Range("b", 0, 3)])
    assert tasks == [[Range("b", 0, 3)]]


def test_single_range_single_task() -> None:
    assert plan_tasks([Range("a", 0, 100)]) == [[Range("a", 0, 100)]]


def test_large_range_is_cut_to_max_records() -> None:
    tasks = plan_tasks([Range("a", 0, 250)], max_records=100)
    assert tasks == [[Range("a", 0, 84)], [Range("a", 84, 167)], [Range("a", 167, 250)]]


def test_min_partitions_splits_one_range() -> None:
    tasks = plan_tasks([Range("a", 0, 100)], min_partitions=4)
    assert len(tasks) == 4
    assert sorted(load(t) for t in tasks) == [25, 25, 25, 25]


def test_min_partitions_above_record_count_gives_one_task_per_record() -> None:
    tasks = plan_tasks([Range("a", 0, 3)], min_partitions=10)
    assert sorted(tasks) == [[Range("a", 0, 1)], [Range("a", 1, 2)], [Range("a", 2, 3)]]


def test_small_ranges_are_grouped() -> None:
    ranges = [Range(f"c/t/{i}", 0, 10) for i in range(10)]
    tasks = plan_tasks(ranges, max_records=1000)
    assert len(tasks) == 1
    assert sorted(tasks[0]) == sorted(ranges)


def test_contiguous_pieces_of_one_split_are_merged() -> None:
    # Adjacent input ranges of the same split in one task come out as one range.
    tasks = plan_tasks([Range("a", 0, 10), Range("a", 10, 20), Range("a", 20, 25)])
    assert tasks == [[Range("a", 0, 25)]]


def test_non_contiguous_pieces_are_not_merged() -> None:
    tasks = plan_tasks([Range("a", 0, 10), Range("a", 11, 20)])
    assert tasks == [[Range("a", 0, 10), Range("a", 11, 20)]]


def test_pieces_of_different_splits_are_not_merged() -> None:
    tasks = plan_tasks([Range("a", 0, 10), Range("b", 10, 20)])
    assert tasks == [[Range("a", 0, 10), Range("b", 10, 20)]]


def test_output_is_deterministic_and_order_independent() -> None:
    ranges = [Range(f"c/t/{i}", i * 7, i * 7 + 13 * (i + 1)) for i in range(8)]
    first = plan_tasks(ranges, min_partitions=3, max_records=40)
    assert plan_tasks(ranges, min_partitions=3, max_records=40) == first
    assert plan_tasks(list(reversed(ranges)), min_partitions=3, max_records=40) == first


def test_accepts_any_iterable() -> None:
    tasks = plan_tasks(r for r in [Range("a", 0, 4), Range("b", 0, 4)])
    assert coverage([r for t in tasks for r in t]) == coverage([Range("a", 0, 4), Range("b", 0, 4)])


def test_no_task_exceeds_max_records_example() -> None:
    tasks = plan_tasks([Range("a", 0, 7), Range("b", 0, 7), Range("c", 0, 6)], max_records=10)
    assert max(load(t) for t in tasks) <= 10


@pytest.mark.parametrize(
    ("ranges", "min_partitions"),
    [
        ([Range("a", 0, 2), Range("b", 0, 2), Range("c", 0, 1)], 4),
        ([Range("a", 0, 5)], 4),
        ([Range("a", 0, 101)], 16),
    ],
)
def test_min_partitions_is_honoured(ranges: list[Range], min_partitions: int) -> None:
    tasks = plan_tasks(ranges, min_partitions=min_partitions)
    assert len(tasks) >= min_partitions


# -- plan_tasks: properties over random range sets -------------------------------


@pytest.mark.parametrize("seed", range(300))
def test_plan_tasks_properties(seed: int) -> None:
    rng = random.Random(seed)
    ranges = random_ranges(rng)
    min_partitions = rng.choice([1, 1, 2, 3, 8, 50])
    max_records = rng.choice([1, 7, 50, 100, 100_000])
    tasks = plan_tasks(ranges, min_partitions=min_partitions, max_records=max_records)
    total = sum(r.size for r in ranges)

    # every record of every input range exactly once
    out = [r for t in tasks for r in t]
    assert coverage(out) == coverage(ranges)
    assert all(c == 1 for c in coverage(out).values())

    if total == 0:
        assert tasks == []
        return
    assert all(task for task in tasks)
    assert all(r.size > 0 for r in out)

    n = expected_tasks(total, min_partitions, max_records)
    assert len(tasks) == n
    loads = [load(t) for t in tasks]
    # balanced: heaviest and lightest differ by at most one record, and no
    # task reads more than max_records
    assert max(loads) - min(loads) <= 1
    assert max(loads) <= max_records

    for task in tasks:
        # merged: no two ranges of a task are contiguous pieces of one split
        ordered = sorted(task)
        for a, b in itertools.pairwise(ordered):
            assert not (a.split == b.split and a.until == b.start)
        # no range twice
        assert len(set(task)) == len(task)

    assert plan_tasks(ranges, min_partitions=min_partitions, max_records=max_records) == tasks


@pytest.mark.parametrize("seed", range(100))
def test_single_split_properties(seed: int) -> None:
    """One big range (the common case of one hot partition) is cut into
    consecutive pieces, one per task, none above max_records."""
    rng = random.Random(seed)
    size = rng.randrange(1, 5000)
    min_partitions = rng.randrange(1, 20)
    max_records = rng.randrange(1, 3000)
    tasks = plan_tasks(
        [Range("a/t/0", 100, 100 + size)], min_partitions=min_partitions, max_records=max_records
    )
    assert coverage([r for t in tasks for r in t]) == coverage([Range("a/t/0", 100, 100 + size)])
    assert max(load(t) for t in tasks) <= max_records
    assert len(tasks) >= math.ceil(size / max_records)
    assert all(len(t) == 1 for t in tasks)
    sizes = sorted(load(t) for t in tasks)
    assert sizes[-1] - sizes[0] <= 1
    assert len(tasks) == expected_tasks(size, min_partitions, max_records)
