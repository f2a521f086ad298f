"""Read marks: the offset and record time of the last record agents read from
each split range, kept per split (``<prefix>/marks/<stream>`` in etcd).

A mark is a fact about the data (record N of a split has time T), so marks of
every query feed one index. Failover translation asks for the latest mark at
or before a query's position: only records that were actually read leave
marks, so a translation never starts after something a query did not read.
"""

from __future__ import annotations

import bisect
import json
import logging
from typing import NamedTuple

from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.coordinator.state.per_stream import ChangedStreams
from multikafka.core.background import BackgroundTasks

logger = logging.getLogger(__name__)

#: Marks kept per split. Older ones are thinned out (every other one dropped),
#: so the index still reaches far back with a bounded size.
MAX_MARKS = 256


class ReadMark(NamedTuple):
    """The last record an agent read of a split range: its offset and time."""

    split: str
    offset: int
    timestamp_ms: int


class ReadMarks:
    def __init__(self, etcd: EtcdClient, prefix: str, *, flush_interval_s: float = 2.0) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/marks/"
        self._flush_interval_s = flush_interval_s
        #: stream -> split -> sorted [(offset, timestamp_ms)]
        self._marks: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self._dirty = ChangedStreams(etcd, self._prefix, self._encode, "read marks")
        self._tasks = BackgroundTasks("read marks")

    async def load(self) -> None:
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            try:
                doc = json.loads(kv.value)
                self._marks[kv.key[len(self._prefix) :]] = {
                    split: sorted((int(o), int(t)) for o, t in points)
                    for split, points in doc.items()
                }
            except MALFORMED:
                logger.warning("unreadable read marks ignored", extra={"key": kv.key})

    def start(self) -> None:
        self._tasks.every("flush", self._flush_interval_s, self.flush)

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.flush()

    def add(self, stream: str, split: str, offset: int, timestamp_ms: int) -> None:
        points = self._marks.setdefault(stream, {}).setdefault(split, [])
        i = bisect.bisect_left(points, (offset, -(2**63)))
        if i < len(points) and points[i][0] == offset:
            return
        points.insert(i, (offset, timestamp_ms))
        if len(points) > MAX_MARKS:
            keep = MAX_MARKS // 2
            points[:] = points[: len(points) - keep : 2] + points[len(points) - keep :]
        self._dirty.add(stream)

    def at_or_before(self, stream: str, split: str, offset: int) -> tuple[int, int] | None:
        """The mark with the largest offset <= ``offset``, or None."""
        points = self._marks.get(stream, {}).get(split, [])
        i = bisect.bisect_right(points, (offset, 2**63))
        return points[i - 1] if i else None

    def forget(self, stream: str) -> None:
        if self._marks.pop(stream, None) is not None:
            self._dirty.add(stream)

    async def flush(self) -> None:
        """Write every changed stream's marks (what etcd does not take now is
        written next time)."""
        await self._dirty.flush()

    def _encode(self, stream: str) -> bytes | None:
        marks = self._marks.get(stream)
        return None if marks is None else json.dumps(marks).encode()
