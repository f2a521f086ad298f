"""What a reader read against what a feed sent: the one count of lost and
duplicated records, for the demo's verification, the chaos soak and the
tests.

Records are keyed ``"<label>:<seq>"`` (:mod:`multikafka.devstack.feed`);
keys of no stream record (fences, a mirror's filler: ``is_stream_key``) are
not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from multikafka.devstack.feed import is_stream_key

#: A record's count stops here (a byte per record: a 20-minute soak reads
#: over half a million).
_MOST = 255


def split_key(key: str) -> tuple[str, int]:
    """``"<label>:<seq>"`` -> (label, seq)."""
    label, _, seq = key.rpartition(":")
    return label, int(seq)


@dataclass(frozen=True)
class SequenceReport:
    """Records sent and never read, read more than once, read but never sent."""

    #: Keys of the records sent (``label:0..n-1``) that were not read.
    missing: list[str]
    #: Key -> times read, of every record read more than once.
    duplicated: dict[str, int]
    #: Keys read that were not sent (a label not expected, a sequence number past the end).
    unexpected: list[str]

    @property
    def lost(self) -> int:
        return len(self.missing)

    @property
    def read_again(self) -> int:
        """Reads beyond the first, over every record."""
        return sum(c - 1 for c in self.duplicated.values())


class ReadCounts:
    """How often each record was read: per label, a count per sequence number."""

    def __init__(self) -> None:
        self._counts: dict[str, bytearray] = {}
        #: Keys that are no ``label:seq`` (never sent by a feed).
        self._other: dict[str, int] = {}

    def add(self, key: str, times: int = 1) -> int:
        """``key`` was read ``times`` more; returns how often it was read
        before (-1 for a key of no stream record, which is not counted)."""
        if not is_stream_key(key):
            return -1
        try:
            label, seq = split_key(key)
            if seq < 0:
                raise ValueError(key)
        except ValueError:
            before = self._other.get(key, 0)
            self._other[key] = before + times
            return before
        return self.add_seq(label, seq, times)

    def add_seq(self, label: str, seq: int, times: int = 1) -> int:
        """Record ``label:seq`` (``seq`` >= 0) was read ``times`` more;
        returns how often before."""
        if seq < 0:
            raise ValueError(f"sequence number {seq} of {label!r} is negative")
        counts = self._counts.setdefault(label, bytearray())
        if seq >= len(counts):
            counts.extend(bytes(seq + 1 - len(counts) + 65536))
        before = counts[seq]
        counts[seq] = min(before + times, _MOST)
        return before

    def count(self, label: str, seq: int) -> int:
        """How often ``label:seq`` was read (0: never)."""
        counts = self._counts.get(label)
        return counts[seq] if counts is not None and 0 <= seq < len(counts) else 0

    def report(self, expected: Mapping[str, int]) -> SequenceReport:
        """Against ``expected`` (label -> records ``label:0..n-1`` sent)."""
        missing: list[str] = []
        duplicated: dict[str, int] = {}
        unexpected: list[str] = []
        for label, n in expected.items():
            counts = self._counts.get(label, bytearray())
            missing += [f"{label}:{s}" for s in range(n) if s >= len(counts) or not counts[s]]
        for label, counts in self._counts.items():
            sent = expected.get(label, 0)
            for seq, c in enumerate(counts):
                if c > 1:
                    duplicated[f"{label}:{seq}"] = c
                if c and seq >= sent:
                    unexpected.append(f"{label}:{seq}")
        for key, c in self._other.items():
            unexpected.append(key)
            if c > 1:
                duplicated[key] = c
        return SequenceReport(missing, duplicated, unexpected)


def count_keys(keys: Iterable[str]) -> ReadCounts:
    """The counts of ``keys`` (one read each)."""
    counts = ReadCounts()
    for key in keys:
        counts.add(key)
    return counts


def sequence_report(
    keys: Iterable[str], expected: Mapping[str, int]
) -> tuple[list[str], dict[str, int]]:
    """Missing keys and duplicated keys (key -> count) among ``keys`` for
    ``expected`` labels with sequence numbers 0..n-1. Keys of no stream
    record are ignored."""
    report = count_keys(keys).report(expected)
    return report.missing, report.duplicated
