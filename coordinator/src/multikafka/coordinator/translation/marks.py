"""Read marks: what agents read of each split, kept per split
(``<prefix>/marks/<stream>/<split>`` in etcd).

A mark is a fact about the data: record N of a split has time T and these
fingerprints, the records just before it those ones, and no record lies
between N and offset ``next`` (only transaction markers or aborted records
may). So marks of every query feed one index. Failover translation asks for
the latest mark at or before a query's position: only records that were
actually read leave marks, so a translation never starts after something a
query did not read; and when that mark's ``next`` reaches the position, the
mark *is* the last record the query read (:meth:`ReadMarks.last_read`),
which a mirror's copy can be found by.

A range read to its end without a record (a transaction's markers) moves
the ``next`` of the mark before it on (:meth:`ReadMarks.passed`); a mark
with fewer fingerprints than :data:`~multikafka.core._fingerprint.TRAILING`
(a short range) takes the rest from the mark of the range before it.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Sequence
from typing import NamedTuple

from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.coordinator.state.per_stream import ChangedStreams
from multikafka.core._background import BackgroundTasks
from multikafka.core._fingerprint import TRAILING, Fingerprint, decode, encode

logger = logging.getLogger(__name__)

#: Marks kept per split. Older ones are thinned out (every other one dropped),
#: so the index still reaches far back with a bounded size.
MAX_MARKS = 256
#: The newest marks of a split keep their fingerprints; older ones only
#: their offset and time (a query that far behind falls back to the
#: strategy's estimate), which bounds a split's key to about 10 KB.
FINGERPRINTED_MARKS = 16


class ReadMark(NamedTuple):
    """The last record an agent read of a split range."""

    split: str
    offset: int
    timestamp_ms: int
    #: Where the read went on to (the range's end, or where it was given
    #: up): no record lies between ``offset`` and here. 0: not known.
    next: int = 0
    #: The range's start (-1: not known).
    start: int = -1
    #: The last records' fingerprints, oldest first (``offset``'s last).
    fingerprints: tuple[Fingerprint, ...] = ()


class Mark(NamedTuple):
    """A mark as the index keeps it (see :class:`ReadMark`)."""

    offset: int
    timestamp_ms: int
    next: int = 0
    fingerprints: tuple[Fingerprint, ...] = ()

    def reaches(self, position: int) -> bool:
        """Whether this mark is the last record before ``position``."""
        return self.offset < position <= self.next


class ReadMarks:
    def __init__(self, etcd: EtcdClient, prefix: str, *, flush_interval_s: float = 2.0) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/marks/"
        self._flush_interval_s = flush_interval_s
        #: stream -> split -> marks sorted by offset
        self._marks: dict[str, dict[str, list[Mark]]] = {}
        #: ``<stream>/<split>`` keys, and the ``<stream>`` keys of the former
        #: layout (one value per stream), which are deleted once rewritten.
        self._dirty = ChangedStreams(etcd, self._prefix, self._encode, "read marks")
        self._tasks = BackgroundTasks("read marks")

    async def load(self) -> None:
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            name = kv.key[len(self._prefix) :]
            stream, _, split = name.partition("/")
            try:
                doc = json.loads(kv.value)
                if split:
                    self._marks.setdefault(stream, {})[split] = _points(doc)
                    continue
                # One value for the whole stream (before marks were kept per
                # split): rewritten per split, then deleted.
                into = self._marks.setdefault(stream, {})
                for s, points in doc.items():
                    into.setdefault(s, _points(points))
                    self._dirty.add(f"{stream}/{s}")
                self._dirty.add(stream)
            except (*MALFORMED, IndexError):
                logger.warning("unreadable read marks ignored", extra={"key": kv.key})

    def start(self) -> None:
        self._tasks.every("flush", self._flush_interval_s, self.flush)

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.flush()

    def add(
        self,
        stream: str,
        split: str,
        offset: int,
        timestamp_ms: int,
        *,
        next: int = 0,
        start: int = -1,
        fingerprints: Sequence[Fingerprint] = (),
    ) -> None:
        """A mark (see :class:`ReadMark`)."""
        points = self._marks.setdefault(stream, {}).setdefault(split, [])
        fps = tuple(fingerprints)
        if len(fps) < TRAILING and start >= 0:
            before = _last_before(points, start)
            if before is not None:
                fps = (*before.fingerprints, *fps)[-TRAILING:]
        new = Mark(offset, timestamp_ms, max(next, 0), fps)
        i = bisect.bisect_left(points, (offset,))
        if i < len(points) and points[i].offset == offset:
            old = points[i]
            merged = old._replace(
                next=max(old.next, new.next),
                fingerprints=max(old.fingerprints, new.fingerprints, key=len),
            )
            if merged == old:
                return
            points[i] = merged
        else:
            points.insert(i, new)
            if len(points) > MAX_MARKS:
                keep = MAX_MARKS // 2
                points[:] = points[: len(points) - keep : 2] + points[len(points) - keep :]
            if len(points) > FINGERPRINTED_MARKS:
                old = points[-FINGERPRINTED_MARKS - 1]
                if old.fingerprints:
                    points[-FINGERPRINTED_MARKS - 1] = old._replace(fingerprints=())
        self._dirty.add(f"{stream}/{split}")

    def passed(self, stream: str, split: str, start: int, until: int) -> None:
        """``[start, until)`` of ``split`` was read and held no record: the
        mark just before ``start``, if it reaches there, now reaches ``until``."""
        points = self._marks.get(stream, {}).get(split, [])
        before = _last_before(points, start)
        if before is None or before.next >= until:
            return
        points[points.index(before)] = before._replace(next=until)
        self._dirty.add(f"{stream}/{split}")

    def at_or_before(self, stream: str, split: str, offset: int) -> Mark | None:
        """The mark with the largest offset <= ``offset``, or None."""
        points = self._marks.get(stream, {}).get(split, [])
        i = bisect.bisect_right(points, (offset, 2**63))
        return points[i - 1] if i else None

    def last_read(self, stream: str, split: str, position: int) -> tuple[Mark | None, bool]:
        """The mark of the last record read before ``position`` as far as
        known, and whether it is exactly that record (its read reached
        ``position``) rather than an earlier one."""
        mark = self.at_or_before(stream, split, position - 1) if position > 0 else None
        return mark, mark is not None and mark.reaches(position)

    def forget(self, stream: str) -> None:
        splits = self._marks.pop(stream, None)
        for split in splits or ():
            self._dirty.add(f"{stream}/{split}")

    async def flush(self) -> None:
        """Write every changed split's marks (what etcd does not take now is
        written next time)."""
        await self._dirty.flush()

    def _encode(self, name: str) -> bytes | None:
        stream, _, split = name.partition("/")
        points = self._marks.get(stream, {}).get(split) if split else None
        if not points:
            return None
        return json.dumps([_stored(m) for m in points], separators=(",", ":")).encode()


def _last_before(points: Sequence[Mark], start: int) -> Mark | None:
    """The mark just before ``start`` if its read reached ``start``."""
    i = bisect.bisect_left(points, (start,))
    before = points[i - 1] if i else None
    return before if before is not None and before.reaches(start) else None


def _stored(m: Mark) -> list[int | str]:
    if not m.next and not m.fingerprints:
        return [m.offset, m.timestamp_ms]
    return [m.offset, m.timestamp_ms, m.next, encode(m.fingerprints)]


def _points(doc: object) -> list[Mark]:
    """Marks as stored: ``[offset, time]`` or ``[offset, time, next, fingerprints]``."""
    if not isinstance(doc, list):
        raise ValueError("read marks are a list")
    marks = []
    for p in doc:
        o, t = int(p[0]), int(p[1])
        if len(p) > 2:
            marks.append(Mark(o, t, int(p[2]), decode(str(p[3]))))
        else:
            marks.append(Mark(o, t))
    return sorted(marks)
