"""Cluster metadata as the coordinator needs it, on confluent-kafka's
``AdminClient``: partition counts, offsets by position or time, consumer-group
commits, and the records of small internal topics such as MirrorMaker 2's
offset syncs (:class:`KafkaMetadataClient`, behind the :class:`MetadataClient`
protocol the fakes implement too).

The last stable offsets, which planning asks for several times a second
(readers read committed records by default), and the earliest are asked
first through a consumer that never reads (``offsets_for_times`` with
Kafka's -1 and -2 under ``read_committed``: the same ``ListOffsets``
request, a fifth of the CPU of ``AdminClient.list_offsets``, which makes a
future per partition); an answer with any partition's error is asked again
through the AdminClient, whose answers tell a deleted partition from one
whose leader did not answer. High watermarks (``read_uncommitted``) are
asked through the AdminClient: a second consumer would hold four more
threads per cluster.

The coordinator reads a stream's records in one case only: on failover, a
mirror's records from the strategy's estimate on, to find the copy of the
last records a query read by their fingerprints (:meth:`KafkaMetadataClient.scan`;
nothing is decoded or kept but the fingerprints sought). Nothing here
imports the read path (Arrow, the compiled converter, payload decoding).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from multikafka.core._kafka_config import (
    READ_COMMITTED,
    READER_DEFAULTS,
    READER_GROUP_ID,
    client_config,
)
from multikafka.core.exceptions import UnavailableError
from multikafka.core.kafka_log import ClientLog, repeat_interval_s
from multikafka.core.model import Connection

_MISSING_PARTITION = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
}
_EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]


class OffsetQuery(NamedTuple):
    """Which offset to look up: ``"earliest"``, ``"latest"`` (the high
    watermark), ``"stable"`` (the last stable offset: where a consumer that
    reads committed records stops, the first offset of the oldest transaction
    still open; the high watermark when none is) or a record time."""

    kind: str
    timestamp_ms: int = 0

    @classmethod
    def earliest(cls) -> OffsetQuery:
        return cls("earliest")

    @classmethod
    def latest(cls) -> OffsetQuery:
        return cls("latest")

    @classmethod
    def stable(cls) -> OffsetQuery:
        return cls("stable")

    @classmethod
    def at_time(cls, timestamp_ms: int) -> OffsetQuery:
        return cls("timestamp", timestamp_ms)


#: How often :meth:`KafkaMetadataClient.read_records` asks for a topic's
#: partitions (new ones are read from then on).
TOPIC_REFRESH_S = 10.0


class RawRecord(NamedTuple):
    """One record of an internal topic, as stored."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: Record time (ms since the epoch).
    timestamp_ms: int


class Record(Protocol):
    """What :meth:`MetadataClient.scan` hands over of a record (a
    ``confluent_kafka.Message`` has it)."""

    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


#: Called with each record a scan reads: ``(topic, partition)`` and the
#: record; False stops reading that partition.
Visit = Callable[[tuple[str, int], Record], bool]


class MetadataClient(Protocol):
    """Cluster metadata as the coordinator needs it. Blocking calls; the
    coordinator runs them on an executor."""

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        """Partitions per topic; topics that do not exist are left out."""
        ...

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        """The offset per ``(topic, partition)`` for ``query``. A time after every
        record resolves to the end offset as it was before the time was looked
        up (never past a record at or after the time, whenever it came)."""
        ...

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        """Store ``offsets`` as the committed offsets of consumer group ``group_id``."""
        ...

    def read_records(
        self,
        reader: str,
        topic: str,
        positions: Mapping[int, int],
        max_records: int,
        timeout_s: float,
    ) -> list[RawRecord] | None:
        """The next records of ``topic`` for ``reader`` (at most
        ``max_records``, all that are there now): each partition from
        ``positions`` (next offset to read) the first time it is read, from
        the beginning if not named, then on from where ``reader``'s last call
        stopped. None while the topic does not exist."""
        ...

    def close_reader(self, reader: str) -> None:
        """Free what :meth:`read_records` holds for ``reader``."""
        ...

    def scan(
        self,
        windows: Mapping[tuple[str, int], tuple[int, int]],
        visit: Visit,
        timeout_s: float,
    ) -> None:
        """Read each partition's records from ``start`` to before ``end``
        (``windows``: ``(topic, partition) -> (start, end)``) in offset order,
        as the stream's readers would (its isolation level), handing each to
        ``visit`` until it says stop. :class:`UnavailableError` when the
        cluster does not answer or the windows are not read within
        ``timeout_s``."""
        ...

    def close(self) -> None: ...


class UnresolvedClient:
    """A cluster whose settings name a ConfigProvider reference that cannot
    be resolved here: every call fails as an unreachable cluster would, with
    the reference's error (cluster, property, reference; never a value), so
    the cluster contributes no range and its status says why."""

    def __init__(self, error: str) -> None:
        self._error = error

    def _fail(self) -> UnavailableError:
        return UnavailableError(self._error)

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        raise self._fail()

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        raise self._fail()

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        raise self._fail()

    def read_records(
        self,
        reader: str,
        topic: str,
        positions: Mapping[int, int],
        max_records: int,
        timeout_s: float,
    ) -> list[RawRecord] | None:
        raise self._fail()

    def close_reader(self, reader: str) -> None:
        pass

    def scan(
        self,
        windows: Mapping[tuple[str, int], tuple[int, int]],
        visit: Visit,
        timeout_s: float,
    ) -> None:
        raise self._fail()

    def close(self) -> None:
        pass


class KafkaMetadataClient:
    """Metadata and offsets of one Kafka cluster."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        config = client_config(
            connection, {"client.id": f"multikafka-coordinator-{connection.cluster}"}
        )
        #: librdkafka's lines of this client's AdminClient and group consumers.
        self._log = ClientLog(
            "coordinator", connection.cluster, interval_s=repeat_interval_s(config)
        )
        self._admin = AdminClient(config, logger=self._log)
        self._group_consumers: dict[str, Consumer] = {}
        #: A consumer that only asks offsets (never joined nor committed): last
        #: stable (it reads committed records) and earliest. Made with the
        #: AdminClient, not at its first use: a client's threads come and go
        #: with it.
        self._offsets = self._consumer(
            f"multikafka-coordinator-{connection.cluster}",
            {"group.id": READER_GROUP_ID, "isolation.level": READ_COMMITTED},
        )
        #: (reader, topic) -> its consumer, the partitions assigned to it, and
        #: when the topic's partitions were last asked for
        self._tails: dict[tuple[str, str], tuple[Consumer, set[int], list[float]]] = {}

    def _consumer(self, client_id: str, forced: Mapping[str, str]) -> Consumer:
        """A consumer of this cluster: the readers' defaults, the stream's
        properties, then ``forced`` (a group id at least)."""
        config = client_config(self._connection, {**READER_DEFAULTS, "client.id": client_id})
        config.update(forced)
        return Consumer(config, logger=self._log)

    def set_log_context(
        self, users: Sequence[tuple[str, str]], *, expected_down: bool = False
    ) -> None:
        self._log.set_users(users, expected_down=expected_down)

    def _serve_logs(self) -> None:
        """Hand librdkafka's queued log lines to :class:`ClientLog`. Nothing
        else serves the queues of an AdminClient or of a consumer that only
        commits: :meth:`partition_counts` (every discovery round) and
        :meth:`close` call this."""
        self._admin.poll(0)
        self._offsets.poll(0)
        for consumer in list(self._group_consumers.values()):  # (commits add some meanwhile)
            consumer.poll(0)

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        try:
            meta = self._admin.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise UnavailableError(f"cluster {self._connection.cluster}: metadata: {exc}") from exc
        finally:
            self._serve_logs()
        counts: dict[str, int] = {}
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                continue
            counts[topic] = len(tmeta.partitions)
        return counts

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        # Earliest and last stable: the offsets consumer, else the AdminClient.
        if query.kind == "earliest":
            found = self._consumer_offsets(partitions, OFFSET_BEGINNING, timeout_s)
            return (
                found if found is not None else self._list_offsets(partitions, _EARLIEST, timeout_s)
            )
        if query.kind == "latest":
            return self._list_offsets(partitions, _LATEST, timeout_s)
        if query.kind == "stable":
            found = self._consumer_offsets(partitions, OFFSET_END, timeout_s)
            return (
                found
                if found is not None
                else self._list_offsets(partitions, _LATEST, timeout_s, committed=True)
            )
        # With no record at or after the time, the answer is the end of the
        # partition as it was *before* the time was looked up: a record
        # appended between the two requests may be at or after the time, and
        # an end asked for afterwards would start past it.
        ends = self._list_offsets(partitions, _LATEST, timeout_s)
        found = self._list_offsets(
            partitions, OffsetSpec.for_timestamp(query.timestamp_ms), timeout_s, by_time=True
        )
        return {tp: found.get(tp, end) for tp, end in ends.items()}

    def _consumer_offsets(
        self, partitions: Sequence[tuple[str, int]], at: int, timeout_s: float
    ) -> dict[tuple[str, int], int] | None:
        """The earliest (``at`` = ``OFFSET_BEGINNING``) or last stable
        (``OFFSET_END``) offsets through the offsets consumer; None when a
        partition has no offset in the answer or the call failed otherwise
        than by timing out (the AdminClient tells deleted from unreachable).
        Raises :class:`UnavailableError` when the cluster did not answer in
        time (asking again would wait as long)."""
        try:
            answer = self._offsets.offsets_for_times(
                [TopicPartition(t, p, at) for t, p in partitions], timeout=timeout_s
            )
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError._TIMED_OUT:
                raise UnavailableError(
                    f"cluster {self._connection.cluster}: list offsets: {exc}"
                ) from exc
            # Partitions or topics unknown (librdkafka says so for the whole
            # call: "no leaders found"), or metadata lost with an unreachable
            # broker: the AdminClient tells which, as it always did.
            return None
        out: dict[tuple[str, int], int] = {}
        for tp in answer:
            if tp.error is not None or tp.offset < 0:
                return None
            out[(tp.topic, tp.partition)] = tp.offset
        return out if len(out) == len(set(partitions)) else None

    def _list_offsets(
        self,
        partitions: Sequence[tuple[str, int]],
        spec: OffsetSpec,
        timeout_s: float,
        *,
        by_time: bool = False,
        committed: bool = False,
    ) -> dict[tuple[str, int], int]:
        request = {TopicPartition(t, p): spec for t, p in partitions}
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        try:
            futures = self._admin.list_offsets(
                request, isolation_level=isolation, request_timeout=timeout_s
            )
            out: dict[tuple[str, int], int] = {}
            for tp, fut in futures.items():
                try:
                    info = fut.result(timeout=timeout_s + 1)
                except KafkaException as exc:
                    if exc.args and exc.args[0].code() in _MISSING_PARTITION:
                        continue  # deleted topic or partition: absent from the answer
                    raise
                # A time lookup that matches no record answers offset -1 and/or
                # timestamp -1; the caller resolves it to the end offset.
                if by_time and (info.offset < 0 or info.timestamp < 0):
                    continue
                if info.offset < 0:
                    # librdkafka answers OFFSET_INVALID (-1001) when it could
                    # not ask the partition leader: no answer, not an offset.
                    raise UnavailableError(
                        f"cluster {self._connection.cluster}: no offset for {tp.topic}/{tp.partition} ({info.offset})"
                    )
                out[(tp.topic, tp.partition)] = info.offset
            return out
        except (KafkaException, TimeoutError) as exc:
            raise UnavailableError(
                f"cluster {self._connection.cluster}: list offsets: {exc}"
            ) from exc

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        consumer = self._group_consumers.get(group_id)
        if consumer is None:
            consumer = self._consumer("multikafka-committer", {"group.id": group_id})
            self._group_consumers[group_id] = consumer
        tps = [TopicPartition(t, p, off) for (t, p), off in offsets.items()]
        try:
            consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise UnavailableError(f"cluster {self._connection.cluster}: commit: {exc}") from exc

    def read_records(
        self,
        reader: str,
        topic: str,
        positions: Mapping[int, int],
        max_records: int,
        timeout_s: float,
    ) -> list[RawRecord] | None:
        tail = self._tails.get((reader, topic))
        if tail is None:
            consumer = self._consumer(
                f"multikafka-coordinator-{topic}",
                # Never joined nor committed: assign only. A compacted or
                # trimmed topic starts later than a kept position: read what
                # is there.
                {"group.id": READER_GROUP_ID, "auto.offset.reset": "earliest"},
            )
            tail = self._tails[(reader, topic)] = (consumer, set(), [0.0])
        consumer, assigned, asked = tail
        if not assigned or time.monotonic() - asked[0] >= TOPIC_REFRESH_S:
            try:
                meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            except KafkaException as exc:
                raise UnavailableError(
                    f"cluster {self._connection.cluster}: metadata: {exc}"
                ) from exc
            asked[0] = time.monotonic()
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            new = sorted(set(meta.partitions) - assigned)
            if new:
                consumer.incremental_assign(
                    [TopicPartition(topic, p, positions.get(p, OFFSET_BEGINNING)) for p in new]
                )
                assigned.update(new)
        out: list[RawRecord] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < max_records and time.monotonic() < deadline:
            batch = consumer.consume(min(max_records - len(out), 10_000), timeout=0.05)
            if not batch:
                break
            for m in batch:
                partition, offset = m.partition(), m.offset()
                if m.error() is None and partition is not None and offset is not None:
                    out.append(RawRecord(partition, offset, m.key(), m.value(), m.timestamp()[1]))
        return out

    def close_reader(self, reader: str) -> None:
        for key in [k for k in self._tails if k[0] == reader]:
            self._tails.pop(key)[0].close()

    def scan(
        self,
        windows: Mapping[tuple[str, int], tuple[int, int]],
        visit: Visit,
        timeout_s: float,
    ) -> None:
        todo = {tp: end for tp, (start, end) in windows.items() if end > start}
        if not todo:
            return
        consumer = self._consumer(
            f"multikafka-coordinator-{self._connection.cluster}-match",
            # Never joined nor committed. A window that starts before the
            # log start (records deleted since) reads what is there.
            {
                "group.id": READER_GROUP_ID,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": "true",
            },
        )
        try:
            consumer.assign([TopicPartition(t, p, windows[(t, p)][0]) for t, p in todo])
            deadline = time.monotonic() + timeout_s
            while todo:
                if time.monotonic() > deadline:
                    raise UnavailableError(
                        f"cluster {self._connection.cluster}: {len(todo)} partitions not read "
                        f"within {timeout_s:.0f}s"
                    )
                msgs = consumer.consume(10_000, timeout=0.1)
                done: set[tuple[str, int]] = set()
                for m in msgs:
                    tp = (m.topic() or "", m.partition() or 0)
                    end = todo.get(tp)
                    if end is None or tp in done:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done.add(tp)
                        elif err.fatal() or not err.retriable():
                            raise UnavailableError(
                                f"cluster {self._connection.cluster}: {err.str()}"
                            )
                        continue
                    offset = m.offset()
                    if offset is None or offset >= end or not visit(tp, m):
                        done.add(tp)
                if not msgs:
                    # Past transaction markers, which no record shows.
                    keys = list(todo)
                    for tp, at in zip(
                        keys, consumer.position([TopicPartition(*k) for k in keys]), strict=True
                    ):
                        if at.offset >= todo[tp]:
                            done.add(tp)
                if done:
                    consumer.pause([TopicPartition(*tp) for tp in done])
                    for tp in done:
                        del todo[tp]
        except KafkaException as exc:
            raise UnavailableError(f"cluster {self._connection.cluster}: read: {exc}") from exc
        finally:
            consumer.close()

    def close(self) -> None:
        self._serve_logs()
        for consumer in [self._offsets, *self._group_consumers.values()]:
            consumer.close()
        self._group_consumers.clear()
        for consumer, _, _ in self._tails.values():
            consumer.close()
        self._tails.clear()
