"""Assigning split ranges to Spark tasks.

:func:`plan_tasks` lays the ranges of one micro-batch end to end (sorted by
split) and cuts that tape into ``n`` consecutive segments of equal size (they
differ by at most one record). So small ranges are grouped, large ones are
cut, every task reads at most ``max_records`` records, there are at least
``min_partitions`` tasks whenever there are that many records, and a task
never holds two pieces of one split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple


class Range(NamedTuple):
    """``[start, until)`` of one split."""

    split: str
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - self.start


def cut(r: Range, piece: int) -> list[Range]:
    """``r`` in consecutive pieces of at most ``piece`` records."""
    return [Range(r.split, s, min(s + piece, r.until)) for s in range(r.start, r.until, piece)]


def plan_tasks(
    ranges: Iterable[Range], *, min_partitions: int = 1, max_records: int = 100_000
) -> list[list[Range]]:
    """Group ``ranges`` into balanced tasks (see the module docstring)."""
    tape = _merge(sorted(r for r in ranges if r.size > 0))
    total = sum(r.size for r in tape)
    if total == 0:
        return []
    n = min(total, max(min_partitions, math.ceil(total / max_records), 1))
    size, bigger = divmod(total, n)  # the first `bigger` tasks get one more record
    tasks: list[list[Range]] = []
    i, pos = 0, tape[0].start  # current range and position in it
    for t in range(n):
        want = size + (1 if t < bigger else 0)
        task: list[Range] = []
        while want:
            r = tape[i]
            take = min(want, r.until - pos)
            task.append(Range(r.split, pos, pos + take))
            want -= take
            pos += take
            if pos == r.until and i + 1 < len(tape):
                i += 1
                pos = tape[i].start
        tasks.append(task)
    return tasks


def _merge(ranges: list[Range]) -> list[Range]:
    """Sorted ranges with contiguous ranges of the same split joined."""
    out: list[Range] = []
    for r in ranges:
        if out and out[-1].split == r.split and out[-1].until == r.start:
            out[-1] = Range(r.split, out[-1].start, r.until)
        else:
            out.append(r)
    return out
