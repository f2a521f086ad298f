"""Reading exact Kafka offset ranges of one cluster: :class:`KafkaRangeConsumer`,
one reused confluent-kafka ``Consumer`` that ``assign``s exact ranges,
``consume``s in large batches and hands them to
:func:`multikafka.reader_agent._arrow.convert`. It never subscribes or joins a
group. :class:`RangeConsumer` is the protocol the agent's fakes implement too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import multikafka.reader_agent._arrow as arrow
from multikafka.core._fingerprint import TRAILING, Fingerprint, fingerprint
from multikafka.core._kafka_config import READER_DEFAULTS, READER_GROUP_ID, client_config
from multikafka.core._ranges import SplitRange
from multikafka.core.exceptions import DataLossError, UnavailableError
from multikafka.core.kafka_log import ClientLog, repeat_interval_s
from multikafka.core.logs import logger_of
from multikafka.core.model import Connection
from multikafka.reader_agent._arrow import Columns

logger = logger_of(__name__)


@dataclass(frozen=True)
class RangeRead:
    """How far one range was read, and the last records read of it: what
    failover translation needs to resume on a mirror right after them."""

    range: SplitRange
    #: The first offset not read: the range's end, or where it was given up.
    #: No record of the range lies between the last one read and here.
    next: int
    #: Offset and record time of the last record read of the range (None: it
    #: held none, only transaction markers or aborted records).
    last: tuple[int, int] | None
    #: Fingerprints of the last records read of the range, oldest first.
    fingerprints: tuple[Fingerprint, ...] = ()


@dataclass
class ReadOutcome:
    """What reading a set of ranges did, beyond the records it returned."""

    #: Last offset and record time read per (topic, partition).
    last: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    #: Offsets found missing (deleted by retention) and skipped.
    lost: int = 0
    #: Ranges given up because the caller asked to abandon them.
    abandoned: list[SplitRange] = field(default_factory=list)
    records: int = 0
    #: Each range read to its end or given up (not those of a read that failed).
    ranges: list[RangeRead] = field(default_factory=list)


class _Tail:
    """The last :data:`TRAILING` records of one range read: rows of the
    batches they came in, fingerprinted only when the range is done (a few
    records per range, never per record)."""

    __slots__ = ("_rows", "_segments", "last")

    def __init__(self) -> None:
        self._segments: list[tuple[Columns, np.ndarray]] = []
        self._rows = 0
        #: Offset and record time of the last record.
        self.last: tuple[int, int] | None = None

    def add(self, cols: Columns, rows: np.ndarray, last: tuple[int, int]) -> None:
        """``rows``: the last (at most :data:`TRAILING`) rows of the range in
        ``cols``, in order; ``last`` the newest one's offset and time."""
        self._segments.append((cols, rows))
        self._rows += len(rows)
        while self._rows - len(self._segments[0][1]) >= TRAILING:
            self._rows -= len(self._segments.pop(0)[1])
        self.last = last

    def fingerprints(self) -> tuple[Fingerprint, ...]:
        out: list[Fingerprint] = []
        for cols, rows in self._segments:
            take = pa.array(rows, pa.int64())
            times = cols.timestamp.take(take).cast(pa.int64()).to_pylist()
            keys = cols.key.take(take).to_pylist()
            values = cols.value.take(take).to_pylist()
            out.extend(
                fingerprint(k, v, t // 1000) for k, v, t in zip(keys, values, times, strict=True)
            )
        return tuple(out[-TRAILING:])


class RangeConsumer(Protocol):
    """Reads exact offset ranges of one cluster; never joins a consumer group."""

    def read(
        self,
        ranges: Sequence[SplitRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        """Yield the records of ``ranges`` in batches; fill ``outcome`` as it goes."""
        ...

    def close(self) -> None: ...


_FREEZE_UNTIL = 1024
_batches = 0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a batch is consumed and
    converted. librdkafka messages are GC-tracked objects; tens of thousands of
    them in flight made young-generation collections about half of the read
    time. They form no reference cycles (reference counting frees them), and
    the pause never spans a ``yield`` into the caller's code.

    At a process's 1st, 2nd, 4th, ... 1024th batch it also freezes what is
    alive (``gc.freeze()``): modules (those the first reads import too), the
    reader agent, the Spark worker's own state, so that full collections no
    longer walk them. pyspark's daemon runs ``gc.collect()`` after every task:
    without the freeze that was half of the Spark Python workers' CPU per
    record (docs/benchmarks.md). Frozen objects are still freed by reference
    counting; only cycles among them are never collected: at most the
    cyclic garbage of eleven moments, once per process."""
    global _batches
    _batches += 1
    if _batches <= _FREEZE_UNTIL and _batches & (_batches - 1) == 0:
        gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


Key = tuple[str, int]


class KafkaRangeConsumer:
    """Reads exact offset ranges from one cluster with one reused consumer.

    The reader remembers where each partition's last range ended: a range
    that starts there continues on what the consumer already fetched (the
    records it consumed past that end, kept as leftovers) and fetches only
    what comes after them, which is what consecutive micro-batches of a split
    in one worker do. The consumer fetches only during a read: at its end,
    what it fetched is taken as leftovers and every partition unassigned
    (parked). Partitions unused for ``idle_reads`` reads are forgotten. A read
    pauses a partition whose range is done while it waits for others, and
    keeps as many leftovers as the partition's range had (at most a consume
    batch), then pauses the partition. After
    an error, or a read its caller stopped early, the reader forgets every
    position and starts the next read from scratch.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        client_id: str = "multikafka-reader",
        batch_size: int = 20_000,
        poll_timeout_s: float = 0.5,
        stall_check_s: float = 10.0,
        watermark_timeout_s: float = 5.0,
        idle_reads: int = 8,
    ) -> None:
        self.connection = connection
        # The end of a partition's log is an event: a range that ends with
        # transaction markers is done when the consumer gets there, though
        # no record says so (:meth:`_advance`).
        config = client_config(
            connection,
            {**READER_DEFAULTS, "client.id": client_id, "enable.partition.eof": "true"},
        )
        config.setdefault("group.id", READER_GROUP_ID)
        #: librdkafka's lines, handed over by consume() (a reader that is not
        #: reading keeps them queued until it reads again or closes).
        self._log = ClientLog(
            "reader",
            connection.cluster,
            unreachable_level=logging.INFO,
            interval_s=repeat_interval_s(config),
        )
        self._consumer = Consumer(config, logger=self._log)
        self._batch_size = batch_size
        self._poll_timeout_s = poll_timeout_s
        self._stall_check_s = stall_check_s
        self._watermark_timeout_s = watermark_timeout_s
        self._idle_reads = idle_reads
        self._closed = False
        #: Partitions the reader knows -> where their next range goes on (the
        #: next offset the consumer delivers, or would once assigned again).
        self._next: dict[Key, int] = {}
        #: Partitions assigned now: those of the read going on (none between reads).
        self._assigned: set[Key] = set()
        self._paused: set[Key] = set()
        #: Reads in a row that did not use a known partition.
        self._unused: dict[Key, int] = {}
        #: Records consumed past the end of a partition's last range: (that
        #: end, the records), in offset order, up to ``_next``.
        self._leftover: dict[Key, tuple[int, Columns]] = {}
        #: Per partition of the read going on: how many records past its
        #: range's end to keep for a next range (:meth:`_hold_for`).
        self._hold: dict[Key, int] = {}
        #: Ranges that continued where their partition's last one ended, and
        #: ranges the consumer had to be assigned at another offset for.
        self.continued = 0
        self.positioned = 0

    def read(
        self,
        ranges: Sequence[SplitRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        todo = [r for r in ranges if r.until > r.start]
        if not todo:
            return
        # Next offset to read per partition. consume(n) waits until n records
        # arrived or the timeout passed, so never ask for more than are left.
        nxt: dict[Key, int] = {}
        ready: list[Columns] = []
        if self._assigned:  # a read left neither finished nor closed
            self._forget(list(self._next))
        for r in todo:
            nxt[(r.topic, r.partition)] = self._continue_at(r, ready)
        # (topic, partition) -> range, for ranges not read to their end yet
        pending = {(r.topic, r.partition): r for r in todo if nxt[(r.topic, r.partition)] < r.until}
        ends = {(r.topic, r.partition): r.until for r in todo}
        self._hold = {(r.topic, r.partition): self._hold_for(r) for r in todo}
        tails = {(r.topic, r.partition): _Tail() for r in todo}
        try:
            self._position_for(pending, nxt)
            for held in ready:
                self._account(held, outcome, tails)
                yield held
            last_progress = time.monotonic()
            while pending:
                left = sum(r.until - nxt[k] for k, r in pending.items())
                with _collector_paused():
                    msgs = self._take(max(1, min(self._batch_size, left)))
                    good = (
                        self._drop_errors(msgs, pending, outcome, fail_on_data_loss) if msgs else []
                    )
                    cols = (
                        self._convert(good, pending, nxt, ends, outcome, tails, include_headers)
                        if good
                        else None
                    )
                    del msgs, good  # release the messages before the collector resumes
                if cols is not None:
                    last_progress = time.monotonic()
                    yield cols
                    continue
                # No record: the consumer may still have moved on, past
                # transaction markers (control records, never handed out) at
                # its range's end, which it signals by reaching the log's end.
                if self._advance(pending, nxt):
                    last_progress = time.monotonic()
                    continue
                if should_abandon():
                    # From the first record not read: after what the read
                    # took from before (leftovers), which the consumer's own
                    # position does not know of before it fetched anything.
                    outcome.abandoned.extend(r._replace(start=nxt[k]) for k, r in pending.items())
                    _ranges_read(todo, pending, nxt, tails, outcome)
                    self._forget(list(pending))
                    return
                if time.monotonic() - last_progress > self._stall_check_s:
                    self._check_truncated(pending, outcome, fail_on_data_loss)
                    last_progress = time.monotonic()
        except BaseException:
            # An error, or the caller stopped reading (GeneratorExit): where
            # the consumer stands is no longer known.
            self._forget(list(self._next))
            raise
        _ranges_read(todo, pending, nxt, tails, outcome)
        self._park(ends, include_headers)

    def _park(self, ends: Mapping[Key, int], include_headers: bool) -> None:
        """After a read: keep what the consumer already fetched past the
        read's ranges as leftovers, and unassign every partition until a read
        needs it. A consumer that went on fetching between reads would fetch
        each record once per worker that ever read its split (tasks move
        between workers), hold it in memory, and keep polling the brokers.
        Unassigned rather than paused: librdkafka took up to a second to fetch
        a resumed partition again, and fetches an assigned one at once."""
        try:
            # Only as many as the partitions still fetched may keep: the
            # consumer's queue can hold far more than the next ranges need.
            room = sum(
                max(self._hold.get(k, 0) - self._held(k, end), 0)
                for k, end in ends.items()
                if k in self._assigned and k not in self._paused
            )
            msgs: list[Any] = (
                self._consumer.consume(min(room, self._batch_size), timeout=0) if room else []
            )
            failed = {(m.topic(), m.partition()) for m in msgs if _failed(m)}
            good = [m for m in msgs if m.error() is None]
            self._forget(list(failed))  # where those stand is not known
            if good:
                with _collector_paused():
                    cols = arrow.convert(good, include_headers=include_headers)
                    del msgs, good
                self._keep_leftovers(cols, ends)
            self._unassign(list(self._assigned))
        except KafkaException as exc:
            logger.warning(
                "could not unassign after a read; starting the next read afresh",
                extra={"cluster": self.connection.cluster, "error": str(exc)},
            )
            self._forget(list(self._next))

    def _hold_for(self, r: SplitRange) -> int:
        """How many records past ``r``'s end its partition keeps for the
        range after it: as many as ``r`` has (the next micro-batch's range of
        a split is about as long), at most a consume batch. librdkafka
        fetches far past a short range (up to ``queued.min.messages`` per
        partition); taking a consume batch of it per partition through
        ``consume`` and converting it made micro-batches of 1,250 records per
        range consume 13-17x their records (docs/benchmarks.md, Small
        micro-batches), mostly for nothing: the split's next range often goes
        to another worker."""
        return max(1, min(self._batch_size, r.until - r.start))

    def _held(self, key: Key, end: int) -> int:
        """Records kept past ``end`` for ``key``."""
        held = self._leftover.get(key)
        return len(held[1]) if held is not None and held[0] == end else 0

    def _continue_at(self, r: SplitRange, ready: list[Columns]) -> int:
        """Where reading ``r`` goes on: after the leftovers it can use (added to
        ``ready``) if it starts where its partition's last range ended, else at
        its start."""
        key = (r.topic, r.partition)
        known = self._next.get(key)
        left = self._leftover.pop(key, None)
        if known is None:
            return r.start
        if left is not None and left[0] == r.start:
            cols = left[1]
            inside = cols.offset.to_numpy(zero_copy_only=False) < r.until
            if inside.all():
                ready.append(cols)
            else:
                if inside.any():
                    ready.append(cols.filter(inside))
                self._leftover[key] = (r.until, cols.filter(~inside))
            self.continued += 1
            return known
        if left is None and known == r.start:
            self.continued += 1
            return known
        return r.start

    def _position_for(self, pending: Mapping[Key, SplitRange], nxt: dict[Key, int]) -> None:
        """Assign what this read must fetch, where it goes on (nothing is
        assigned between reads), and forget what went unused for long."""
        for key in self._next:
            self._unused[key] = 0 if key in nxt else self._unused.get(key, 0) + 1
        self._forget([k for k, n in self._unused.items() if n >= self._idle_reads])
        if pending:
            self._consumer.incremental_assign([TopicPartition(*k, nxt[k]) for k in pending])
            self._assigned.update(pending)
        for key in pending:
            self.positioned += self._next.get(key) != nxt[key]
            self._next[key] = nxt[key]
            self._unused[key] = 0

    def _forget(self, keys: Sequence[Key]) -> None:
        """Unassign ``keys`` (those assigned) and drop what the reader knew of
        them."""
        keys = [k for k in keys if k in self._next]
        if not keys:
            return
        try:
            self._unassign([k for k in keys if k in self._assigned])
        except KafkaException as exc:
            logger.warning(
                "unassign failed; starting over",
                extra={"cluster": self.connection.cluster, "error": str(exc)},
            )
            with contextlib.suppress(KafkaException):
                self._consumer.resume([TopicPartition(*k) for k in self._assigned])
            self._consumer.unassign()
            keys = list(self._next)
        for k in keys:
            self._next.pop(k, None)
            self._unused.pop(k, None)
            self._leftover.pop(k, None)
            self._paused.discard(k)
            self._assigned.discard(k)

    def _unassign(self, keys: Sequence[Key]) -> None:
        """Unassign ``keys`` (assigned ones), resumed first: librdkafka keeps
        a partition's pause across unassign and assign, and a paused partition
        assigned again would never be fetched."""
        if not keys:
            return
        held = [TopicPartition(*k) for k in keys]
        self._consumer.resume(held)
        self._consumer.incremental_unassign(held)
        self._assigned.difference_update(keys)
        self._paused.difference_update(keys)

    def _position(self, r: SplitRange) -> int:
        """Next offset to read of ``r``'s partition (its start before any read)."""
        pos = int(self._consumer.position([TopicPartition(r.topic, r.partition)])[0].offset)
        return pos if pos >= 0 else r.start

    def _finish(self, pending: dict[Key, SplitRange], key: Key) -> None:
        """``key``'s range ended early (records lost): nothing of it to keep."""
        del pending[key]
        self._forget([key])

    def _drop_errors(
        self,
        msgs: list[Any],
        pending: dict[tuple[str, int], SplitRange],
        outcome: ReadOutcome,
        fail_on_data_loss: bool,
    ) -> list[Any]:
        errors = [m for m in msgs if m.error() is not None]
        if not errors:
            return msgs
        for m in filter(_failed, errors):
            err = m.error()
            key = (m.topic(), m.partition())
            if key in self._next and key not in pending:
                # A partition this read does not need (known for a range that
                # may go on there) failed: the next range starts afresh.
                self._forget([key])
                continue
            if err.code() == KafkaError._AUTO_OFFSET_RESET:
                self._out_of_range(m.topic(), m.partition(), pending, outcome, fail_on_data_loss)
                continue
            if err.fatal() or not err.retriable():
                raise UnavailableError(f"cluster {self.connection.cluster}: {err.str()}")
            logger.warning(
                "read error, retrying",
                extra={"cluster": self.connection.cluster, "error": err.str()},
            )
        return [m for m in msgs if m.error() is None]

    def _data_loss(self, r: SplitRange, frm: int, to: int, why: str, fail: bool) -> None:
        split = r.split
        if fail:
            raise DataLossError(
                f"{split}: offsets {frm}..{to - 1} are gone ({why}); "
                "set failOnDataLoss=false to skip lost records and go on"
            )
        logger.warning(
            "records lost, skipping", extra={"split": split, "lost": to - frm, "why": why}
        )

    def _out_of_range(
        self,
        topic: str,
        partition: int,
        pending: dict[tuple[str, int], SplitRange],
        outcome: ReadOutcome,
        fail_on_data_loss: bool,
    ) -> None:
        """The broker says the offset to read is out of range: either before
        the log start (records deleted by retention) or past the log end (the
        partition was truncated or recreated). Never read elsewhere instead."""
        r = pending.get((topic, partition))
        if r is None:
            return
        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self._watermark_timeout_s
        )
        pos = self._position(r)
        if pos >= high:
            self._data_loss(r, pos, r.until, f"the partition now ends at {high}", fail_on_data_loss)
            outcome.lost += r.until - pos
            self._finish(pending, (topic, partition))
            return
        lost_until = min(low, r.until)
        self._data_loss(r, pos, lost_until, "deleted before they were read", fail_on_data_loss)
        outcome.lost += max(lost_until - pos, 0)
        if low >= r.until:
            self._finish(pending, (topic, partition))
        else:
            self._consumer.seek(TopicPartition(topic, partition, low))

    def _check_truncated(
        self,
        pending: dict[tuple[str, int], SplitRange],
        outcome: ReadOutcome,
        fail_on_data_loss: bool,
    ) -> None:
        """No record for a while. If a partition now ends before the range does
        (and everything up to its end was read), it was truncated or recreated:
        data loss. If it has records past where the reader stands, the
        consumer is not fetching them (kept state went wrong): assign the
        partition again there. Otherwise keep waiting (the cluster may be slow
        or away)."""
        for key, r in list(pending.items()):
            tp = TopicPartition(r.topic, r.partition)
            try:
                _, high = self._consumer.get_watermark_offsets(
                    tp, timeout=self._watermark_timeout_s
                )
            except KafkaException:
                logger.warning(
                    "cluster unreachable while reading; waiting",
                    extra={
                        "cluster": self.connection.cluster,
                        "topic": r.topic,
                        "partition": r.partition,
                    },
                )
                continue
            pos = self._position(r)
            at = self._next.get(key, r.start)
            if at < high:
                logger.warning(
                    "no records for a while although the partition has them; assigning it again",
                    extra={"cluster": self.connection.cluster, "split": f"{r.topic}/{r.partition}"},
                )
                self._forget([key])
                self._consumer.incremental_assign([TopicPartition(*key, at)])
                self._assigned.add(key)
                self._next[key] = at
                self._unused[key] = 0
                continue
            if high >= r.until or pos < high:
                continue
            self._data_loss(r, pos, r.until, f"the partition now ends at {high}", fail_on_data_loss)
            outcome.lost += r.until - pos
            self._finish(pending, key)

    def _convert(
        self,
        msgs: list[Any],
        pending: dict[Key, SplitRange],
        nxt: dict[Key, int],
        ends: Mapping[Key, int],
        outcome: ReadOutcome,
        tails: Mapping[Key, _Tail],
        include_headers: bool,
    ) -> Columns | None:
        cols = arrow.convert(msgs, include_headers=include_headers)
        pairs, codes = cols.partitions()
        self._advance(pending, nxt)
        # Records past their range's end: only partitions this batch finished,
        # or finished earlier in the read, have them (the rare path, taken
        # about once per range). They are kept for a range that goes on there.
        if any(tp not in pending for tp in pairs):
            limits = np.array([ends.get(tp, -1) for tp in pairs], np.int64)
            keep = cols.offset.to_numpy(zero_copy_only=False) < limits[codes]
            if not keep.all():
                self._keep_leftovers(cols.filter(~keep), ends)
                if not keep.any():
                    return None
                cols, codes = cols.filter(keep), codes[keep]
        self._account(cols, outcome, tails, (pairs, codes))
        return cols

    def _take(self, n: int) -> list[Any]:
        """Up to ``n`` of what the consumer has fetched, waiting (up to the
        poll timeout) only for the first. ``consume(n, timeout)`` waits for
        ``n``, and ``n`` counts the offsets of transaction markers, which are
        never handed out: a range of a transactional topic waited the whole
        timeout for records that do not exist. librdkafka queues a fetch's
        records at once, so the batch is what one fetch brought, or more."""
        consumer = self._consumer
        msgs: list[Any] = consumer.consume(n, timeout=0)
        if msgs:
            return msgs
        msgs = consumer.consume(1, timeout=self._poll_timeout_s)
        if msgs and n > 1:
            msgs += consumer.consume(n - 1, timeout=0)
        return msgs

    def _advance(self, pending: dict[Key, SplitRange], nxt: dict[Key, int]) -> list[Key]:
        """Move each pending partition on to where the consumer stands (past
        the records it handed out, and past transaction markers), and finish
        those at or past their range's end; returns them."""
        keys = list(pending)
        positions = self._consumer.position([TopicPartition(t, p) for t, p in keys])
        done = []
        for key, pos in zip(keys, positions, strict=True):
            if pos.offset >= 0:
                nxt[key] = self._next[key] = pos.offset
            if pos.offset >= pending[key].until:
                del pending[key]  # stays assigned: the next range may go on from here
                done.append(key)
        # While the read waits for other partitions, one whose range is done
        # is paused: librdkafka hands out a partition's fetched records
        # together (tansu answers a fetch with one partition's records, tens
        # of thousands), and what comes past the range's end would fill the
        # next consume batches, each record consumed and converted, mostly
        # for nothing. The last ones done keep fetching until the read parks.
        if pending:
            self._pause(done)
        return done

    def _pause(self, keys: Sequence[Key]) -> None:
        """Pause fetching ``keys`` (those not paused yet)."""
        keys = [k for k in keys if k not in self._paused]
        if keys:
            self._consumer.pause([TopicPartition(*k) for k in keys])
            self._paused.update(keys)

    def _keep_leftovers(self, past: Columns, ends: Mapping[Key, int]) -> None:
        """Keep records consumed past their range's end, per partition; pause
        a partition once it has a consume batch of them waiting."""
        pairs, codes = past.partitions()
        last = past.last_per_partition((pairs, codes))
        for i, key in enumerate(pairs):
            end = ends.get(key)
            if end is None or key not in self._next:
                self._forget([key])  # not this read's: where it stands is unknown
                continue
            mine = past.filter(codes == i) if len(pairs) > 1 else past
            held = self._leftover.get(key)
            if held is not None and held[0] == end:
                mine = _concat(held[1], mine)
            self._leftover[key] = (end, mine)
            self._next[key] = max(self._next[key], last[key][0] + 1)
            if len(mine) >= self._hold.get(key, self._batch_size):
                self._pause([key])

    @staticmethod
    def _account(
        cols: Columns,
        outcome: ReadOutcome,
        tails: Mapping[Key, _Tail],
        index: arrow.PartitionIndex | None = None,
    ) -> None:
        """Count ``cols`` into ``outcome`` (records, last record per
        partition) and into the ranges' ``tails`` (their last rows)."""
        pairs, codes = index or cols.partitions()
        one = len(pairs) == 1
        for tp, last in cols.last_per_partition((pairs, codes)).items():
            prev = outcome.last.get(tp)
            if prev is None or last[0] > prev[0]:
                outcome.last[tp] = last
            tail = tails.get(tp)
            if tail is not None:
                n = len(codes)
                rows = (
                    np.arange(max(n - TRAILING, 0), n)
                    if one
                    else np.flatnonzero(codes == pairs.index(tp))[-TRAILING:]
                )
                tail.add(cols, rows, last)
        outcome.records += len(cols)

    def set_log_context(
        self, users: Sequence[tuple[str, str]], *, expected_down: bool = False
    ) -> None:
        self._log.set_users(users, expected_down=expected_down)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()


def _ranges_read(
    todo: Sequence[SplitRange],
    pending: Mapping[Key, SplitRange],
    nxt: Mapping[Key, int],
    tails: Mapping[Key, _Tail],
    outcome: ReadOutcome,
) -> None:
    """Note how far each range of a read went: to its end, or (still
    ``pending``, given up) to the first offset not read."""
    for r in todo:
        key = (r.topic, r.partition)
        tail = tails[key]
        nxt_offset = min(nxt[key], r.until) if key in pending else r.until
        fps = tail.fingerprints() if tail.last is not None else ()
        outcome.ranges.append(RangeRead(r, nxt_offset, tail.last, fps))


def _concat(a: Columns, b: Columns) -> Columns:
    """``a`` followed by ``b``."""
    return Columns(
        **{
            f.name: (
                None
                if getattr(a, f.name) is None
                else pa.concat_arrays([getattr(a, f.name), getattr(b, f.name)])
            )
            for f in dataclasses.fields(Columns)
        }
    )


def _failed(msg: Any) -> bool:
    """Whether ``msg`` is an error (reaching a partition's end is none)."""
    err = msg.error()
    return err is not None and err.code() != KafkaError._PARTITION_EOF
