"""Records the demo produces on the local clusters: topics, sequence-numbered
records, fences, and :class:`Feed`, which produces them over time and follows
producers from one cluster to another as the demo fails over and back.

Records are keyed ``"<label>:<seq>"`` so a reader can check that every
sequence number arrived exactly once. Volume is produced in batches; each
partition then gets one single-record *fence* (key ``__fence__``), which makes
tansu's high watermark right for everything before it (docs/architecture.md,
"The test broker's gaps").
Keys starting with ``__`` (fences, the filler of :mod:`.mirror`) are no stream
records: :func:`is_stream_key`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from multikafka.core.kafka_log import ClientLog
from multikafka.core.retry import poll

FENCE_KEY = b"__fence__"
#: Keys of records that are no stream records (fences, a mirror's filler).
NOT_STREAM_PREFIX = "__"

#: A producer's delivery callback: (error or None, message).
OnDelivery = Callable[[KafkaError | None, Message], None]


class ChunkCopy(Protocol):
    """What a :class:`Feed` needs of a mirror that copies each chunk it
    produces (:class:`~multikafka.devstack.mirror.Mm2Copy`, which imports
    this module: the feed knows it only by this)."""

    #: Bootstrap of the cluster copied from...
    source: str
    #: ...of the mirror cluster, and the topic there.
    mirror: str
    topic: str

    def copy(
        self,
        source_topic: str,
        partitions: int,
        label: str,
        seqs: range,
        timestamp_ms: int,
        upstream: dict[int, int],
    ) -> None: ...

    def fence(self, partitions: int) -> None: ...

    def close(self) -> None: ...


def is_stream_key(key: str) -> bool:
    """Whether a record's key (as text) is a stream record's, not a fence's
    or a mirror's filler."""
    return not key.startswith(NOT_STREAM_PREFIX)


def client_log(bootstrap: str) -> ClientLog:
    """librdkafka's lines of a dev-stack client (a cluster the demo killed
    on purpose is no news: "cannot connect" at INFO)."""
    return ClientLog("devstack", bootstrap, unreachable_level=logging.INFO)


def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    timeout_s: float = 15.0,
    *,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create ``{topic: partitions}`` with topic ``config`` (topics that exist
    already are fine, whatever their configuration)."""
    admin = AdminClient({"bootstrap.servers": bootstrap}, logger=client_log(bootstrap))
    try:
        futures = admin.create_topics(
            [NewTopic(t, n, 1, config=dict(config or {})) for t, n in topics.items()],
            request_timeout=timeout_s,
        )
        for topic, fut in futures.items():
            try:
                fut.result(timeout_s)
            except KafkaException as exc:
                # librdkafka's own request timeout and this wait race: both
                # mean the cluster did not answer in time.
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT:
                    raise TimeoutError(
                        f"creating topic {topic} at {bootstrap}: {error.str()}"
                    ) from exc
                text = str(exc)
                if "already exists" not in text.lower() and "TOPIC_ALREADY_EXISTS" not in text:
                    raise
            _wait_topic(admin, topic, topics[topic], timeout_s)
    finally:
        admin.poll(0)  # its log lines (nothing else serves an AdminClient's queue)


def _wait_topic(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> None:
    def there() -> bool:
        meta = admin.list_topics(timeout=timeout_s).topics.get(topic)
        return meta is not None and meta.error is None and len(meta.partitions) >= partitions

    poll(there, timeout_s=timeout_s, what=f"topic {topic} with {partitions} partitions")


class SequenceProducer:
    """Produces ``"<label>:<seq>"`` records round-robin over partitions
    (``transactional``: inside transactions, :meth:`begin` and :meth:`commit`)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        batched: bool = True,
        value_size: int = 64,
        transactional: bool = False,
    ) -> None:
        config: dict[str, str | int] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
        if batched:
            config.update({"batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000})
        else:
            config["batch.num.messages"] = 1
        if transactional:
            config["transactional.id"] = f"devstack-{uuid.uuid4().hex[:12]}"
        self._producer = Producer(config, logger=client_log(bootstrap))
        if transactional:
            self._producer.init_transactions(30)
        self._pad = b"x" * max(value_size - 16, 0)

    def begin(self) -> None:
        self._producer.begin_transaction()

    def commit(self, timeout_s: float = 30.0) -> None:
        """Commit the transaction (its records delivered first): its commit
        marker takes an offset in every partition it wrote."""
        self._producer.commit_transaction(timeout_s)

    def produce(
        self,
        topic: str,
        partitions: int,
        label: str,
        seqs: Iterable[int],
        *,
        timestamp_ms: int | None = None,
        headers: bool = False,
        on_delivery: OnDelivery | None = None,
    ) -> int:
        n = 0
        for seq in seqs:
            key = f"{label}:{seq}".encode()
            kwargs: dict[str, object] = {"partition": seq % partitions}
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            if headers:
                kwargs["headers"] = [("seq", str(seq).encode())]
            if on_delivery is not None:
                kwargs["on_delivery"] = on_delivery
            while True:
                try:
                    self._producer.produce(topic, key=key, value=b"%d|" % seq + self._pad, **kwargs)  # type: ignore[arg-type]
                    break
                except BufferError:
                    self._producer.poll(0.05)
            n += 1
        self._producer.poll(0)
        return n

    def raw(self, topic: str, partition: int, key: bytes) -> None:
        """One record with ``key`` and an empty value (a mirror's filler)."""
        self._producer.produce(topic, key=key, value=b"", partition=partition)

    def flush(self, timeout_s: float = 30.0) -> None:
        left = self._producer.flush(timeout_s)
        if left:
            raise TimeoutError(f"{left} records not delivered in {timeout_s}s")

    def close(self) -> None:
        """Stop the client (it would otherwise reconnect, and log, until
        garbage-collected)."""
        self._producer.close()


def offsets_into(offsets: dict[int, int]) -> OnDelivery:
    """A delivery callback putting each ``label:seq`` record's offset in
    ``offsets`` (seq -> offset); a failed delivery raises from ``flush``."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            raise KafkaException(err)
        key = msg.key()
        if key is not None and is_stream_key(key.decode()):
            offsets[int(key.rsplit(b":", 1)[1])] = msg.offset()  # type: ignore[assignment]

    return on_delivery


def fence(bootstrap: str, topic: str, partitions: int) -> None:
    """One single-record batch per partition (makes tansu's watermarks exact)."""
    producer = SequenceProducer(bootstrap, batched=False)
    try:
        for p in range(partitions):
            producer._producer.produce(topic, key=FENCE_KEY, value=b"", partition=p)
        producer.flush()
    finally:
        producer.close()


class Feed(threading.Thread):
    """Produces ``label:seq`` records in chunks with pauses until stopped or
    ``limit`` is reached. Each chunk goes to every current target cluster with
    the same record timestamp, which is what a timestamp-preserving mirror
    does (``rewritten`` targets get other values: a mirror that transforms
    what it copies); :meth:`route` moves producers (and mirrors) between
    clusters.

    ``sent`` lists ``(seq, timestamp_ms)`` of every record produced.

    With ``mirror``, the targets are the mirror's source only and each chunk
    is also copied as MirrorMaker 2 would (:class:`~.mirror.Mm2Copy`: the
    remote topic, shifted offsets, offset syncs) until the first
    :meth:`route`: the source is gone or producers moved, and the copy stops.
    Routed to the mirror cluster, producers write its remote topic.
    """

    def __init__(
        self,
        targets: list[str],
        topic: str,
        partitions: int,
        label: str,
        *,
        chunk: int = 50,
        pause_s: float = 0.05,
        limit: int | None = None,
        mirror: ChunkCopy | None = None,
        rewritten: Iterable[str] = (),
    ) -> None:
        super().__init__(name=f"feed-{label}", daemon=True)
        if mirror is not None and list(targets) != [mirror.source]:
            raise ValueError("a feed with a mirror produces to the mirror's source only")
        self.topic = topic
        self.partitions = partitions
        self.label = label
        self.chunk = chunk
        self.pause_s = pause_s
        self.limit = limit
        self.sent: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._producers: dict[str, SequenceProducer] = {}
        self._targets = list(targets)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._fenced = False
        self.mirror = mirror
        #: Clusters whose records differ from the others' in their values (a
        #: mirror that transforms what it copies).
        self.rewritten = frozenset(rewritten)
        #: Whether chunks are still copied to ``mirror``.
        self._copying = mirror is not None
        #: Where :meth:`held` fenced the targets: len(sent) at the time.
        self._fences: list[int] = []
        #: Records a cluster refused or never acknowledged: (seq, bootstrap,
        #: error). A record missing there is the feed's loss, not a reader's.
        self.undelivered: list[tuple[int, str, str]] = []
        #: bootstrap -> partition -> offset of the newest record it took.
        self.delivered: dict[str, dict[int, int]] = {}
        self._noting: dict[str, OnDelivery] = {}
        #: (len(sent) at the change, targets from then on), for every :meth:`route`.
        self.routes: list[tuple[int, list[str]]] = [(0, list(targets))]

    def _topic_of(self, bootstrap: str) -> str:
        return self.mirror.topic if self.mirror and bootstrap == self.mirror.mirror else self.topic

    def route(self, targets: list[str]) -> int:
        """From the next chunk on, produce to ``targets`` only. Returns the
        first sequence number that goes to the new targets."""
        with self._lock:
            self._targets = list(targets)
            self.routes.append((len(self.sent), list(targets)))
            self._copying = False
            for gone in set(self._producers) - set(targets):
                # Nothing is pending (every chunk is flushed): dropping the
                # producer stops it from reconnecting to a dead cluster.
                del self._producers[gone]
            return len(self.sent)

    @property
    def targets(self) -> list[str]:
        """The clusters (bootstrap addresses) chunks go to now."""
        with self._lock:
            return list(self._targets)

    def delivered_now(self) -> tuple[list[str], dict[str, dict[int, int]]]:
        """The targets, and the newest offset per partition each cluster
        took, between chunks (each target took the same records)."""
        with self._lock:
            return list(self._targets), {b: dict(o) for b, o in self.delivered.items()}

    @contextlib.contextmanager
    def held(self, *, fenced: bool = False) -> Iterator[int]:
        """Produce nothing while inside (the chunk in flight ends first);
        yields the first sequence number produced afterwards. With
        ``fenced``, first fence every target, each the same way, so mirrors
        keep the same offsets and every high watermark is exact."""
        with self._lock:
            if fenced:
                for bootstrap in self._targets:
                    fence(bootstrap, self._topic_of(bootstrap), self.partitions)
                self._fences.append(len(self.sent))
            yield len(self.sent)

    def mirror_to(self, bootstrap: str, *, held_below: int = 5000) -> None:
        """Make a new (empty) cluster an exact mirror and a target: every
        record sent so far, each to its partition with its record time, and
        the fences of :meth:`held` where they were, so its offsets are the
        other targets'; then every chunk from now on. The bulk is copied
        while the feed goes on; the last ``held_below`` records or fewer
        with the feed held. (Record times are kept; a broker's append times,
        which tansu looks times up by, are those of the copy.)"""
        producer = SequenceProducer(bootstrap)
        done, fenced = 0, 0
        try:
            while True:
                with self._lock:
                    upto, fences = len(self.sent), list(self._fences)
                    if upto - done <= held_below:
                        self._copy(producer, bootstrap, done, upto, fences[fenced:])
                        self._targets.append(bootstrap)
                        self.routes.append((len(self.sent), list(self._targets)))
                        return
                    sent = self.sent[done:upto]
                n = sum(1 for f in fences[fenced:] if f <= upto)
                self._copy(producer, bootstrap, done, upto, fences[fenced : fenced + n], sent)
                done, fenced = upto, fenced + n
        finally:
            producer.close()

    def _copy(
        self,
        producer: SequenceProducer,
        bootstrap: str,
        lo: int,
        hi: int,
        fences: list[int],
        sent: list[tuple[int, int]] | None = None,
    ) -> None:
        """Records ``lo``..``hi - 1`` to ``bootstrap`` with their record
        times, fencing every partition where ``fences`` say (in order)."""
        records = sent if sent is not None else self.sent[lo:hi]
        cuts = [f for f in fences if lo <= f <= hi]
        at = lo
        for end in [*cuts, hi]:
            for ts, group in itertools.groupby(records[at - lo : end - lo], key=lambda r: r[1]):
                producer.produce(
                    self.topic, self.partitions, self.label, (s for s, _ in group), timestamp_ms=ts
                )
            producer.flush()
            if end in cuts:
                fence(bootstrap, self.topic, self.partitions)
                cuts.remove(end)
            at = end

    def _noted(self, bootstrap: str) -> OnDelivery:
        """The delivery callback of ``bootstrap`` (one per cluster): keeps the
        records it failed to take, and the newest offset of each partition it
        took."""
        known = self._noting.get(bootstrap)
        if known is not None:
            return known
        offsets = self.delivered.setdefault(bootstrap, {})

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                key = (msg.key() or b"").decode()
                seq = int(key.rsplit(":", 1)[1]) if is_stream_key(key) else -1
                self.undelivered.append((seq, bootstrap, str(err)))
                return
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None:
                offsets[partition] = max(offset, offsets.get(partition, -1))

        self._noting[bootstrap] = on_delivery
        return on_delivery

    def margin_window(
        self, read_from_primary: Iterable[int], cut: int, margin_ms: int, slack_ms: int = 1000
    ) -> set[int]:
        """Sequence numbers a timestamp failover may read twice when it falls
        back to its estimate: per partition, those sent within ``margin_ms``
        before the last record read from the primary among those sent before
        ``cut`` (see :meth:`route`), plus ``slack_ms`` because tansu looks
        times up by append time, not create time. Per partition, because a
        query's reads of its partitions stop at different records when the
        primary dies (one task may not have started yet)."""
        sent = dict(self.sent)
        last: dict[int, int] = {}
        for s in read_from_primary:
            if s < cut:
                p = s % self.partitions
                last[p] = max(last.get(p, sent[s]), sent[s])
        return {
            s
            for s, ts in self.sent
            if (p := s % self.partitions) in last
            and last[p] - margin_ms - slack_ms <= ts <= last[p]
        }

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop producing, fence the current targets; returns records sent."""
        self._stop_event.set()
        self.join(timeout_s)
        if self.error is not None:
            raise RuntimeError("feed failed") from self.error
        self._fence()
        with self._lock:
            for producer in self._producers.values():
                producer.close()
            self._producers.clear()
            if self.mirror is not None:
                self.mirror.close()
        return len(self.sent)

    def _fence(self) -> None:
        with self._lock:
            if not self._fenced:
                for bootstrap in self._targets:
                    fence(bootstrap, self._topic_of(bootstrap), self.partitions)
                if self._copying and self.mirror is not None:
                    self.mirror.fence(self.partitions)
                self._fenced = True

    def run(self) -> None:
        seq = 0
        try:
            while not self._stop_event.is_set() and (self.limit is None or seq < self.limit):
                n = self.chunk if self.limit is None else min(self.chunk, self.limit - seq)
                seqs = range(seq, seq + n)
                with self._lock:  # a route change waits for the chunk in flight
                    # Timed once it may go: a chunk held back is produced
                    # after the hold, and timed so (as a real producer's).
                    ts = int(time.time() * 1000)
                    upstream: dict[int, int] = {}
                    for bootstrap in self._targets:
                        producer = self._producers.get(bootstrap)
                        if producer is None:
                            producer = self._producers[bootstrap] = SequenceProducer(
                                bootstrap, value_size=80 if bootstrap in self.rewritten else 64
                            )
                        producer.produce(
                            self._topic_of(bootstrap),
                            self.partitions,
                            self.label,
                            seqs,
                            timestamp_ms=ts,
                            on_delivery=(
                                offsets_into(upstream) if self._copying else self._noted(bootstrap)
                            ),
                        )
                        producer.flush()
                    if self._copying and self.mirror is not None:
                        self.mirror.copy(
                            self.topic, self.partitions, self.label, seqs, ts, upstream
                        )
                    self.sent.extend((s, ts) for s in seqs)
                seq += n
                self._stop_event.wait(self.pause_s)
            if self.limit is not None and seq >= self.limit:
                self._fence()  # all produced: make the end readable at once
        except BaseException as exc:
            self.error = exc
