"""Finding a mirror's copy of the last records a query read, by their
fingerprints (:mod:`multikafka.core._fingerprint`): pure logic, fed a mirror
partition's records in offset order by whoever reads them.

The target is a *run*: the fingerprints of the last few records read,
oldest first. A mirror keeps records in order, so their copies stand in a
row there too; a run found is the copy of what was read, and the query goes
on right after its last record.

* **A re-sent batch** puts a run on the mirror twice or more, the copies at
  least a run's length apart: the latest copy is taken, so the records of
  the batch are not read a second time.
* **Identical records in a row** (same key, value and time) make a run be
  found at overlapping places: no record tells them apart, so the first of
  those places is taken (the one that can only mean reading again, never
  skipping).
* **A mirror that lags** (the source died before it copied the newest
  records read) holds only the run's beginning: the longest beginning found
  tells where the copied part of what was read ends.
* A run of one fingerprint (a range that read one record) is taken where it
  is first found.

The caller bounds the records fed (from the strategy's estimate, a lower
bound, up to its margin): a copy outside them is not found, and the caller
falls back to the estimate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from multikafka.core._fingerprint import Fingerprint

__all__ = ["Found", "Matcher"]


class Found(NamedTuple):
    """Where the copy of the last records read was found."""

    #: Offset of the copy of the last record found: resume at ``offset + 1``.
    offset: int
    #: Fingerprints of the run found in a row (all of them: the copy of the
    #: last record read; fewer: the mirror lacks the newest).
    matched: int
    #: Of how many in the run.
    of: int
    #: Places the run (or its beginning) was found.
    places: int


class Matcher:
    """Feed it a mirror partition's records in offset order (:meth:`feed`),
    then ask :meth:`found`."""

    def __init__(self, run: Sequence[Fingerprint]) -> None:
        if not run:
            raise ValueError("nothing to match: the run of fingerprints is empty")
        self.run = tuple(run)
        #: Record times in the run: a record at another time is no copy (and
        #: need not be fingerprinted, see :meth:`feed`).
        self.times = frozenset(fp.timestamp_ms for fp in self.run)
        self._recent: deque[Fingerprint | None] = deque(maxlen=len(self.run))
        #: The longest beginning of the run found so far, and where it ended:
        #: (offset, records fed before it).
        self._longest = 0
        self._at: list[tuple[int, int]] = []
        self.fed = 0

    def feed(self, offset: int, fp: Fingerprint | None) -> None:
        """The mirror's next record: its fingerprint, or None for a record
        whose time is none of :attr:`times` (it cannot be in the run)."""
        index = self.fed
        self.fed += 1
        recent = self._recent
        recent.append(fp)
        if fp is None or fp.timestamp_ms not in self.times:
            return
        run = self.run
        for j in range(min(len(run), len(recent)), self._longest - 1, -1):
            if j and fp == run[j - 1] and _ends_with(recent, run, j):
                if j > self._longest:
                    self._longest, self._at = j, []
                self._at.append((offset, index))
                return

    @property
    def complete(self) -> bool:
        """Whether the whole run was found (somewhere)."""
        return self._longest == len(self.run)

    def found(self) -> Found | None:
        """Where the run's copy ends (see the module's rules), or None."""
        if not self._at:
            return None
        j = self._longest
        if j == 1:
            return Found(self._at[0][0], 1, len(self.run), len(self._at))
        # Places less than a run's length of records apart overlap:
        # identical records in a row.
        first_of_last = self._at[0]
        for before, at in zip(self._at, self._at[1:], strict=False):
            if at[1] - before[1] >= j:
                first_of_last = at
        return Found(first_of_last[0], j, len(self.run), len(self._at))


def _ends_with(recent: deque[Fingerprint | None], run: tuple[Fingerprint, ...], j: int) -> bool:
    """Whether the last ``j`` records fed are the run's first ``j``."""
    n = len(recent)
    return all(recent[n - j + i] == run[i] for i in range(j))
