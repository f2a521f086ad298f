"""Assigning split ranges to Spark tasks.

:func:`plan_tasks` turns the ranges of one micro-batch into a balanced set of
tasks: ranges larger than a task's fair share are cut, small ones are grouped,
and pieces go largest-first to the least-loaded task (LPT), so the heaviest
and lightest tasks differ by at most one piece. Pieces of the same split that
land in the same task are merged back into one contiguous range.
"""

from __future__ import annotations

import heapq
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
    """Group ``ranges`` into tasks: at least ``min_partitions`` of them when
    there are that many records, none reading more than ``max_records``
    (and none more than its fair share plus one piece)."""
    live = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in live)
    if total == 0:
        return []
    n = min(total, max(min_partitions, math.ceil(total / max_records), 1))
    piece = min(max_records, math.ceil(total / n))
    pieces = [p for r in live for p in cut(r, piece)]
    pieces.sort(key=lambda p: (-p.size, p.split, p.start))
    bins: list[list[Range]] = [[] for _ in range(n)]
    heap = [(0, i) for i in range(n)]
    for p in pieces:
        load, i = heapq.heappop(heap)
        bins[i].append(p)
        heapq.heappush(heap, (load + p.size, i))
    return [_merge(b) for b in bins if b]


def _merge(pieces: list[Range]) -> list[Range]:
    out: list[Range] = []
    for p in sorted(pieces):
        if out and out[-1].split == p.split and out[-1].until == p.start:
            out[-1] = Range(p.split, out[-1].start, p.until)
        else:
            out.append(p)
    return out
