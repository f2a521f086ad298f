"""The reader agent: one per process (a Spark Python worker, or standalone).

It owns one sub-reader per (stream, cluster), reads the exact ranges of a task
through them, and keeps them in line with the coordinator's reconcile events:
a cluster whose connection changed gets its sub-reader restarted, a removed,
failed or standby cluster gets it closed and its counters dropped, and only
those; the others keep their consumers. Sub-readers idle for longer than the
idle timeout are closed too (Spark has no executor-close hook).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from itertools import groupby

import pyarrow as pa

import multikafka.reader_agent._startup as startup
from multikafka.core import _ranges as ranges
from multikafka.core._background import BackgroundThreads
from multikafka.core._ranges import SplitRange
from multikafka.core.logs import logger_of
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent._arrow import record_batch
from multikafka.reader_agent._link import CoordinatorLink
from multikafka.reader_agent._payloads import MalformedCounts
from multikafka.reader_agent._range_consumer import ReadOutcome
from multikafka.reader_agent._subreader import (
    RangeConsumerFactory,
    Slot,
    SubReader,
    SubReaderStats,
    kafka_range_consumer,
    slot_of,
)
from multikafka.reader_agent._task import ReadTask
from multikafka.v1 import common_pb2, reader_pb2

logger = logger_of(__name__)

#: Cluster states in which an agent keeps no sub-reader.
_NOT_READ = {common_pb2.FAILED, common_pb2.STANDBY, common_pb2.REMOVED}

Key = tuple[str, str]


class ReaderAgent:
    def __init__(
        self,
        *,
        agent_id: str | None = None,
        factory: RangeConsumerFactory = kafka_range_consumer,
        idle_timeout_s: float = 120.0,
        heartbeat_interval_s: float = 2.0,
        concurrent_clusters: bool = True,
    ) -> None:
        self.agent_id = agent_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._factory = factory
        self.idle_timeout_s = idle_timeout_s
        self._heartbeat_s = heartbeat_interval_s
        #: Whether a task's clusters are read at the same time (one thread
        #: per cluster beyond the first), so their fetch waits overlap.
        self.concurrent_clusters = concurrent_clusters
        self._lock = threading.RLock()
        #: Sub-readers by slot: (stream, cluster), plus the fingerprint of
        #: a query's librdkafka overrides for queries that set some.
        self._subs: dict[Slot, SubReader] = {}
        self._stats: dict[Key, SubReaderStats] = {}
        #: (stream, cluster) -> desired state from the coordinator's events.
        self._desired: dict[Key, reader_pb2.ClusterDesired] = {}
        self.applied_generation = 0
        #: Whether a snapshot arrived (so a cluster missing from _desired is gone).
        self._synced = False
        #: Clusters removed since they were last known (bounded), so tasks
        #: still reading them abandon their ranges.
        self._removed: dict[Key, None] = {}
        self._links: dict[ConnectConfig, CoordinatorLink] = {}
        self._threads = BackgroundThreads("multikafka-agent")
        self._threads.every("idle-reaper", max(min(idle_timeout_s / 4, 5.0), 0.05), self.reap_idle)
        self.pid = os.getpid()

    # -- reading -------------------------------------------------------------

    def read(self, task: ReadTask, *, task_slots: int = 0) -> Iterator[pa.RecordBatch]:
        """Read every range of ``task``; yield Arrow batches. Reports the last
        record read per split (and any abandoned range) to the coordinator,
        with ``task_slots``: how many tasks the Spark application reading
        runs at once (0: unknown), which sizes the query's next batches."""
        startup.stamp("task")
        link = self.connect(task.coordinator) if task.coordinator else None
        startup.stamp("linked")
        report = _Reads()
        if task.generation > self.applied_generation:
            logger.debug(
                "task planned at a newer generation; checking connections",
                extra={"generation": task.generation},
            )
        ranges = sorted(task.ranges, key=lambda r: r.cluster)
        clusters = [(c, list(g)) for c, g in groupby(ranges, key=lambda r: r.cluster)]
        try:
            if len(clusters) > 1 and self.concurrent_clusters:
                yield from self._read_clusters_at_once(task, clusters, report)
            else:
                for cluster, group in clusters:
                    yield from self._read_cluster(task, cluster, group, report)
        finally:
            if link is not None and report:
                link.report(report.request(task.stream, task.query_id, task_slots))
            startup.write()

    def _read_clusters_at_once(
        self,
        task: ReadTask,
        clusters: list[tuple[str, list[SplitRange]]],
        report: _Reads,
    ) -> Iterator[pa.RecordBatch]:
        """Read each cluster's ranges on a thread of its own and yield their
        batches as they come: one cluster's fetch wait no longer adds to
        another's. At most a few batches per cluster wait to be taken. When
        the caller stops early (or a cluster fails), the other clusters'
        reads stop at their next batch or poll, and release their
        sub-readers before this returns."""
        done = threading.Event()
        slots = threading.Semaphore(2 * len(clusters))
        out: queue.SimpleQueue[pa.RecordBatch | _Ended] = queue.SimpleQueue()
        reports = [_Reads() for _ in clusters]

        def pump(cluster: str, ranges: list[SplitRange], mine: _Reads) -> None:
            error: BaseException | None = None
            batches = self._read_cluster(task, cluster, ranges, mine, cancelled=done.is_set)
            try:
                for batch in batches:
                    while not slots.acquire(timeout=0.05):
                        if done.is_set():
                            return
                    out.put(batch)
                    if done.is_set():
                        return
            except BaseException as exc:
                error = exc
            finally:
                batches.close()  # releases the sub-reader, reports what was read
                out.put(_Ended(error))

        threads = [
            threading.Thread(
                target=pump, args=(c, r, mine), name=f"multikafka-read-{c}", daemon=True
            )
            for (c, r), mine in zip(clusters, reports, strict=True)
        ]
        for t in threads:
            t.start()
        try:
            running = len(threads)
            while running:
                item = out.get()
                if isinstance(item, _Ended):
                    running -= 1
                    if item.error is not None:
                        raise item.error
                    continue
                slots.release()
                yield item
        finally:
            done.set()
            for t in threads:
                t.join()
            for mine in reports:
                report.marks.extend(mine.marks)
                report.passed.extend(mine.passed)
                report.abandoned.extend(mine.abandoned)

    def _read_cluster(
        self,
        task: ReadTask,
        cluster: str,
        ranges: list[SplitRange],
        report: _Reads,
        *,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Generator[pa.RecordBatch, None, None]:
        """Read ``ranges`` of one cluster. ``cancelled``: the task stopped
        (another cluster failed, or Spark stopped reading): the reader gives
        up its ranges, which are not reported as abandoned."""
        key = (task.stream, cluster)
        sub = self._acquire(key, task)
        startup.stamp(f"sub-reader {cluster}")
        first_records = f"first records {cluster}"
        outcome = ReadOutcome()
        malformed = MalformedCounts()
        try:
            for round_ in _rounds(ranges):
                if cancelled():
                    break
                for cols in sub.consumer.read(
                    round_,
                    outcome,
                    include_headers=task.include_headers,
                    fail_on_data_loss=task.fail_on_data_loss,
                    should_abandon=lambda: cancelled() or self._gone(key, task.generation),
                ):
                    startup.stamp(first_records)  # a dict lookup per batch
                    yield task.decoding.apply(
                        record_batch(cols, cluster, include_headers=task.include_headers),
                        stream=task.stream,
                        counts=malformed,
                    )
        finally:
            self._release(sub)
            if cancelled():  # the task stopped: nothing was abandoned
                outcome.abandoned.clear()
            with self._lock:
                stats = self._stats.get(key)  # gone if the cluster was removed meanwhile
                if stats is not None:
                    stats.records_read += outcome.records
                    stats.abandoned_ranges += len(outcome.abandoned)
                    stats.malformed_records += malformed.dropped
                    stats.corrupt_records += malformed.corrupt
                    stats.malformed_failures += malformed.failed
                    stats.splits.touch(r.split for r in ranges)
            report.add(cluster, outcome)

    def _gone(self, key: Key, planned_at: int) -> bool:
        """Whether ranges of ``key`` should be abandoned: its cluster is no
        longer read, or was removed after the task was planned (an agent that
        has not applied the task's generation yet cannot tell)."""
        with self._lock:
            desired = self._desired.get(key)
            if desired is not None:
                return desired.state in _NOT_READ
            if key in self._removed:
                return True
            return self._synced and self.applied_generation >= planned_at

    def _acquire(self, key: Key, task: ReadTask) -> SubReader:
        conn = task.clusters[key[1]]
        slot = slot_of(*key, task.overrides.fingerprint)
        with self._lock:
            sub = self._subs.get(slot)
            if sub is not None and sub.fingerprint != conn.fingerprint:
                # The task carries newer connection settings than this
                # sub-reader (pull side of reconcile): restart it.
                self._retire(sub, restart=True)
                sub = None
            if sub is None:
                sub = SubReader(key[0], conn, self._factory, task.overrides)
                self._subs[slot] = sub
                self._stats.setdefault(key, SubReaderStats())
            sub.in_use += 1
            return sub

    def _release(self, sub: SubReader) -> None:
        with self._lock:
            sub.in_use -= 1
            sub.last_used = time.monotonic()
            if sub.close_pending and sub.in_use == 0:
                sub.close()

    def _retire(self, sub: SubReader, *, restart: bool = False) -> None:
        """Take ``sub`` out of service (caller holds the lock): close it now, or
        when its last task releases it."""
        if self._subs.get(sub.slot) is sub:
            del self._subs[sub.slot]
        if restart:
            self._stats.setdefault(sub.key, SubReaderStats()).restarts += 1
        if sub.in_use:
            sub.close_pending = True
        else:
            sub.close()

    # -- reconcile -----------------------------------------------------------

    def apply(self, event: reader_pb2.ReconcileEvent) -> None:
        """Apply a reconcile event: restart only the sub-readers whose cluster
        connection changed, close those of clusters no longer read."""
        with self._lock:
            if event.snapshot:
                known = {(d.stream, d.cluster) for d in event.clusters}
                for key in [k for k in self._desired if k not in known]:
                    self._apply_one(
                        reader_pb2.ClusterDesired(
                            stream=key[0], cluster=key[1], state=common_pb2.REMOVED
                        )
                    )
                self._synced = True
            for desired in event.clusters:
                self._apply_one(desired)
            self.applied_generation = max(self.applied_generation, event.generation)

    def _apply_one(self, desired: reader_pb2.ClusterDesired) -> None:
        key = (desired.stream, desired.cluster)
        # Every sub-reader of the cluster: the plain one and those of queries
        # with librdkafka overrides.
        subs = [sub for sub in self._subs.values() if sub.key == key]
        if desired.state == common_pb2.REMOVED:
            self._removed[key] = None
            while len(self._removed) > 1024:
                del self._removed[next(iter(self._removed))]
            self._desired.pop(key, None)
            self._stats.pop(key, None)
            for sub in subs:
                self._retire(sub)
            return
        self._desired[key] = desired
        self._removed.pop(key, None)
        for sub in subs:
            if desired.state in _NOT_READ:
                self._retire(sub)
            elif sub.fingerprint != desired.fingerprint:
                self._retire(sub, restart=True)

    def stats(self) -> tuple[int, list[reader_pb2.SubReaderStats]]:
        with self._lock:
            return self.applied_generation, [
                reader_pb2.SubReaderStats(
                    stream=s,
                    cluster=c,
                    records_read=st.records_read,
                    restarts=st.restarts,
                    abandoned_ranges=st.abandoned_ranges,
                    malformed_records=st.malformed_records,
                    corrupt_records=st.corrupt_records,
                    malformed_failures=st.malformed_failures,
                    splits=st.splits.names(),
                )
                for (s, c), st in sorted(self._stats.items())
            ]

    # -- coordinator link ----------------------------------------------------

    def connect(self, coordinator: ConnectConfig | str) -> CoordinatorLink:
        """Register with the coordinator (once per coordinator: ``host:port``
        or several, or a full :class:`ConnectConfig`) and subscribe."""
        if isinstance(coordinator, str):
            coordinator = ConnectConfig.parse(coordinator)
        with self._lock:
            link = self._links.get(coordinator)
            if link is None:
                link = CoordinatorLink(
                    coordinator,
                    self.agent_id,
                    self.apply,
                    self.stats,
                    heartbeat_interval_s=self._heartbeat_s,
                )
                self._links[coordinator] = link
                link.start()
            return link

    # -- lifecycle -----------------------------------------------------------

    def sub_readers(self) -> list[Key]:
        """The (stream, cluster) pairs the agent has a consumer for."""
        with self._lock:
            return sorted({sub.key for sub in self._subs.values()})

    def slots(self) -> list[Slot]:
        """Every sub-reader's slot: (stream, cluster), and (stream, cluster,
        overrides fingerprint) for queries with librdkafka overrides."""
        with self._lock:
            return sorted(self._subs)

    def tracked(self) -> list[Key]:
        """Every (stream, cluster) the agent keeps anything for."""
        with self._lock:
            subs = {sub.key for sub in self._subs.values()}
            return sorted(subs | set(self._stats) | set(self._desired))

    def reap_idle(self) -> int:
        """Close sub-readers idle for longer than the idle timeout."""
        now = time.monotonic()
        with self._lock:
            idle = [
                s
                for s in self._subs.values()
                if s.in_use == 0 and now - s.last_used > self.idle_timeout_s
            ]
            for sub in idle:
                self._retire(sub)
        return len(idle)

    def close(self) -> None:
        self._threads.stop()
        with self._lock:
            for sub in list(self._subs.values()):
                self._retire(sub)
            links = list(self._links.values())
            self._links.clear()
        for link in links:
            link.close()


@dataclass
class _Reads:
    """What a task read (per range: how far, its last records and their
    fingerprints) and gave up (ranges of clusters that went away), reported
    to the coordinator when it ends."""

    marks: list[reader_pb2.ReadMark] = field(default_factory=list)
    passed: list[reader_pb2.ReadSpan] = field(default_factory=list)
    abandoned: list[SplitRange] = field(default_factory=list)

    def add(self, cluster: str, outcome: ReadOutcome) -> None:
        """What reading ``cluster``'s ranges did. A read that failed has no
        range results: the last record it read of each split is still a
        mark, without how far the read went."""
        marked: set[tuple[str, int]] = set()
        for rr in outcome.ranges:
            r = rr.range
            if rr.last is None:
                if rr.next > r.start:
                    self.passed.append(
                        reader_pb2.ReadSpan(split=r.split, from_offset=r.start, next_offset=rr.next)
                    )
                continue
            marked.add((r.topic, r.partition))
            self.marks.append(
                reader_pb2.ReadMark(
                    split=r.split,
                    last_offset=rr.last[0],
                    last_timestamp_ms=rr.last[1],
                    next_offset=rr.next,
                    from_offset=r.start,
                    fingerprint_times=[fp.timestamp_ms for fp in rr.fingerprints],
                    fingerprint_digests=[fp.digest for fp in rr.fingerprints],
                )
            )
        self.marks.extend(
            reader_pb2.ReadMark(
                split=f"{cluster}/{topic}/{partition}", last_offset=offset, last_timestamp_ms=ts
            )
            for (topic, partition), (offset, ts) in outcome.last.items()
            if (topic, partition) not in marked
        )
        self.abandoned.extend(outcome.abandoned)

    def __bool__(self) -> bool:
        return bool(self.marks or self.passed or self.abandoned)

    def request(
        self, stream: str, query_id: str, task_slots: int = 0
    ) -> reader_pb2.ReportReadsRequest:
        request = reader_pb2.ReportReadsRequest(
            stream=stream,
            query_id=query_id,
            marks=self.marks,
            passed=self.passed,
            task_slots=task_slots,
        )
        if self.abandoned:
            request.abandoned.CopyFrom(ranges.to_columns(self.abandoned))
        return request


@dataclass(frozen=True)
class _Ended:
    """A cluster's read ended (with the error that ended it, if any)."""

    error: BaseException | None


def _rounds(ranges: list[SplitRange]) -> Iterator[list[SplitRange]]:
    """Ranges in rounds with each partition at most once per round (a task may
    hold two pieces of one split)."""
    todo = sorted(ranges, key=lambda r: (r.topic, r.partition, r.start))
    while todo:
        seen: set[tuple[str, int]] = set()
        this: list[SplitRange] = []
        rest: list[SplitRange] = []
        for r in todo:
            (rest if (r.topic, r.partition) in seen else this).append(r)
            seen.add((r.topic, r.partition))
        yield this
        todo = rest


_agent: ReaderAgent | None = None
_agent_lock = threading.Lock()


def get_agent() -> ReaderAgent:
    """The process-wide agent (created on first use; a forked child gets its own)."""
    global _agent
    with _agent_lock:
        if _agent is None or _agent.pid != os.getpid():
            _agent = ReaderAgent()
        return _agent
