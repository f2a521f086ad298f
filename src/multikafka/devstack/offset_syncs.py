"""When MirrorMaker 2 writes an offset sync: the rule of MM2's
``OffsetSyncWriter`` (apache/kafka ``connect/mirror/.../OffsetSyncWriter.java``
and ``MirrorSourceTask.java``, at commit
``1eb7644349cb07139d6a3c1ad1986979647cac99``, the one
``multikafka.coordinator.translation.mm2`` follows), as pure logic for the
dev stack's mirror (:mod:`multikafka.devstack.mirror`).

MM2 calls ``maybeQueueOffsetSyncs(partition, upstream, downstream)`` for every
record once the target acknowledged its copy (``commitRecord``), in the order
of the source partition. Per source partition it keeps the previous upstream
and downstream offsets and the downstream offset of the last sync it queued
at once (``PartitionState``). **A record's sync is queued at once** when any
of these holds:

* it is the first record of the partition since the task started;
* ``downstream - (last_sync_downstream + 1) >= offset.lag.max``: translated
  from the last sync (one past it), the record's copy would be ``offset.lag.max``
  or more records behind (default 100);
* ``upstream - previous_upstream != 1``: an upstream offset was skipped
  (a transaction marker, a compacted or filtered record);
* ``downstream < previous_downstream``: the remote topic went back (truncated
  or recreated).

Otherwise the record's sync is **delayed**: the newest delayed sync of each
partition is written at the task's next offset commit (``commit()``:
``promoteDelayedOffsetSyncs``, every ``offset.flush.interval.ms``, 60 s by
default), so a partition that goes quiet still gets a sync for its last record.
A promoted sync does not move ``last_sync_downstream``. (MM2 also keeps at most
10 syncs in flight and coalesces queued ones per partition; the dev stack
writes each sync before the next chunk, so nothing coalesces.)

What this gives a failover (``OffsetSyncStore.translateDownstream``: the newest
sync at or below position ``p``, plus one when ``p`` is past it): with no
delayed sync written, consecutive syncs of a partition are at most
``offset.lag.max + 1`` upstream offsets apart, and at most ``offset.lag.max``
records follow the newest, so at most ``offset.lag.max`` records per partition
are read again (:func:`multikafka.coordinator.translation.mm2.bound.read_again`
states that bound for given syncs and positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multikafka.core.mm2_records import OffsetSync

#: MM2's ``offset.lag.max`` default (``MirrorSourceConfig.OFFSET_LAG_MAX_DEFAULT``).
OFFSET_LAG_MAX = 100
#: Kafka Connect's ``offset.flush.interval.ms`` default, in seconds: how often
#: MM2 writes delayed syncs.
COMMIT_INTERVAL_S = 60.0


@dataclass
class PartitionState:
    """MM2's ``OffsetSyncWriter.PartitionState`` of one source partition."""

    offset_lag_max: int
    previous_upstream: int = -1
    previous_downstream: int = -1
    last_sync_downstream: int = -1

    def update(self, upstream: int, downstream: int) -> bool:
        """Take the next copied record; True if its sync is written at once."""
        first = self.last_sync_downstream == -1
        too_stale = downstream - (self.last_sync_downstream + 1) >= self.offset_lag_max
        skipped_upstream = upstream - self.previous_upstream != 1
        truncated_downstream = downstream < self.previous_downstream
        now = first or too_stale or skipped_upstream or truncated_downstream
        if now:
            self.last_sync_downstream = downstream
        self.previous_upstream = upstream
        self.previous_downstream = downstream
        return now


@dataclass
class OffsetSyncWriter:
    """Which offset syncs MM2 writes for the records it copies: :meth:`copied`
    for each record (in each source partition's order) answers the sync to
    write now, if any; :meth:`commit` the delayed ones due at an offset commit."""

    offset_lag_max: int = OFFSET_LAG_MAX
    _states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    _delayed: dict[tuple[str, int], OffsetSync] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.offset_lag_max < 0:
            raise ValueError(f"offset_lag_max {self.offset_lag_max} is negative")

    def copied(
        self, topic: str, partition: int, upstream: int, downstream: int
    ) -> OffsetSync | None:
        """Record ``upstream`` of the source's ``topic``/``partition`` was
        copied as ``downstream``: the sync to write now, or None (delayed)."""
        key = (topic, partition)
        state = self._states.setdefault(key, PartitionState(self.offset_lag_max))
        sync = OffsetSync(topic, partition, upstream, downstream)
        if state.update(upstream, downstream):
            self._delayed.pop(key, None)
            return sync
        self._delayed[key] = sync
        return None

    def commit(self) -> list[OffsetSync]:
        """An offset commit: the newest delayed sync of each partition, to write now."""
        due = list(self._delayed.values())
        self._delayed.clear()
        return due
