"""The offset vectors each query exchanged lately, decoded once.

A query's ``LatestOffsets`` sends as its start the end it was answered the
trigger before, and as its commit the start before that. Decoding and
checking 100 splits' columns costs a busy coordinator more than planning
them, so :class:`RecentVectors` keeps, per query, the last few vectors it
sent or was sent, keyed by their wire bytes: the same bytes are the same
vector, so an answer from here is what decoding would give. Anything else is
decoded and checked as before.

Bounded: a few vectors per query, and at most ``max_splits`` splits held in
all (the queries used longest ago go first); a vector larger than a tenth of
that is never kept.
"""

from __future__ import annotations

from collections import OrderedDict

from multikafka.core import _offsets as ov
from multikafka.core._offsets import SplitOffsets
from multikafka.v1 import planner_pb2

__all__ = ["RecentVectors"]

#: Vectors kept per query: its last start, the end it was answered, and the one before.
PER_QUERY = 3
#: Splits held in all (~30 bytes each, wire bytes and columns: ~9 MB).
MAX_SPLITS = 300_000


class RecentVectors:
    """Decoded offset vectors of recent requests and answers, per query."""

    def __init__(self, *, per_query: int = PER_QUERY, max_splits: int = MAX_SPLITS) -> None:
        self._per_query = per_query
        self._max_splits = max_splits
        #: query id -> wire bytes -> vector, least recently used first.
        self._queries: OrderedDict[str, OrderedDict[bytes, SplitOffsets]] = OrderedDict()
        self._splits = 0
        #: Vectors answered from here, and decoded (for tests and benchmarks).
        self.hits = 0
        self.misses = 0

    def decode(self, query_id: str, msg: planner_pb2.OffsetColumns, field: str) -> SplitOffsets:
        """:func:`~multikafka.core._offsets.from_columns` of ``msg``, from
        here when the query exchanged the same vector lately."""
        if not len(msg.partitions) and not len(msg.clusters):
            return ov.from_columns(msg, field)
        key = msg.SerializeToString(deterministic=True)
        mine = self._queries.get(query_id)
        if mine is not None:
            found = mine.get(key)
            if found is not None:
                self.hits += 1
                mine.move_to_end(key)
                self._queries.move_to_end(query_id)
                return found
        self.misses += 1
        value = ov.from_columns(msg, field)
        self._keep(query_id, key, value)
        return value

    def encode(self, query_id: str, value: SplitOffsets) -> planner_pb2.OffsetColumns:
        """:func:`~multikafka.core._offsets.to_columns` of ``value``, kept as
        the vector the query will likely send next."""
        msg = ov.to_columns(value)
        # Kept only if it would decode: the same check as from_columns's.
        if len(value) and int(value.offsets.min()) >= 0:
            self._keep(query_id, msg.SerializeToString(deterministic=True), value)
        return msg

    def forget(self, query_id: str) -> None:
        mine = self._queries.pop(query_id, None)
        if mine is not None:
            self._splits -= sum(len(v) for v in mine.values())

    def __len__(self) -> int:
        """Vectors held."""
        return sum(len(m) for m in self._queries.values())

    def __contains__(self, query_id: object) -> bool:
        """Whether vectors of ``query_id`` are held."""
        return query_id in self._queries

    @property
    def splits(self) -> int:
        """Splits held, in all vectors."""
        return self._splits

    def _keep(self, query_id: str, key: bytes, value: SplitOffsets) -> None:
        if len(value) * 10 > self._max_splits:
            return
        mine = self._queries.get(query_id)
        if mine is None:
            mine = self._queries[query_id] = OrderedDict()
        else:
            self._queries.move_to_end(query_id)
        old = mine.pop(key, None)
        if old is not None:
            self._splits -= len(old)
        mine[key] = value
        self._splits += len(value)
        while len(mine) > self._per_query:
            _, dropped = mine.popitem(last=False)
            self._splits -= len(dropped)
        while self._splits > self._max_splits and self._queries:
            _, gone = self._queries.popitem(last=False)
            self._splits -= sum(len(v) for v in gone.values())
