"""A mirror for the dev stack that looks like MirrorMaker 2's to a reader:
:class:`Mm2Copy` copies what a :class:`~multikafka.devstack.feed.Feed`
produces on the source cluster into the remote topic on the mirror cluster,
with **shifted offsets**, and writes MM2-format offset syncs.

* **Remote topic** (``east.orders`` under MM2's default policy; the caller
  names it): created with the source's partitions and first given ``shifts[p]``
  records (key ``__earlier__``) per partition, as if an earlier replication had
  filled it, so the copy of upstream offset ``u`` is ``u + shifts[p]``;
* **transaction markers** (``marker_every`` chunks, 0 = never): every such
  chunk is copied in a transaction, as an exactly-once MM2 copies, whose
  commit marker takes an offset in each partition after it (no reader sees
  it): the shift then grows over time. The earlier records are no stream
  records (``feed.is_stream_key``), as fences are, so a verification does
  not count them;
* **offset syncs**: ``mm2-offset-syncs.<alias>.internal`` (the caller names
  it and the cluster that holds it), one partition, ``cleanup.policy=compact``
  as MM2's ``createSinglePartitionCompactedTopic`` makes it (tansu accepts and
  reports the setting; whether it compacts is not checked here), written by
  :class:`OffsetSyncsTopic` when
  :class:`~multikafka.devstack.offset_syncs.OffsetSyncWriter` says MM2 would.

The copy is synchronous: each chunk is copied (and its syncs written) before
the feed produces the next, with the source's record timestamps, so the
mirror never lags. Upstream and downstream offsets are what the brokers
acknowledged. ``Mm2Copy.syncs`` lists every sync written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from multikafka.core.mm2 import ReplicationPolicy, offset_syncs_topic, remote_topic
from multikafka.core.mm2_records import OffsetSync
from multikafka.devstack.feed import (
    Feed,
    SequenceProducer,
    client_log,
    create_topics,
    fence,
    offsets_into,
)
from multikafka.devstack.offset_syncs import COMMIT_INTERVAL_S, OFFSET_LAG_MAX, OffsetSyncWriter
from multikafka.devstack.stack import stream_doc

#: How long until the coordinator surely read a sync: its leader reads the
#: offset syncs every 0.2 s (``MirrorSyncs``' poll interval); a read of a few
#: records takes well under a second more, on a loaded machine too.
TAIL_S = 1.0
#: Records the remote topic held before the copy started.
EARLIER_KEY = b"__earlier__"


def create_syncs_topic(bootstrap: str, topic: str, timeout_s: float = 15.0) -> None:
    """The offset-syncs topic as MM2 creates it: 1 partition, compacted."""
    create_topics(bootstrap, {topic: 1}, timeout_s, config={"cleanup.policy": "compact"})


class OffsetSyncsTopic:
    """Writes MM2 offset syncs into an offset-syncs topic on ``bootstrap``
    (named with :func:`multikafka.core.mm2.offset_syncs_topic`), as MM2 does:
    the topic created as MM2 creates it on first use, records
    ``OffsetSync(...).encode()`` in partition 0, one record per produce
    request (tansu's high watermark is right only then, and the coordinator
    tails this topic up to it). The one writer of the dev stack's mirrors
    (:class:`Mm2Copy`) and of the chaos world's
    (:class:`~multikafka.devstack.chaos.MirrorSyncFeed`)."""

    def __init__(self, bootstrap: str, topic: str, *, message_timeout_ms: int = 0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._config: dict[str, str | int] = {
            "bootstrap.servers": bootstrap,
            "batch.num.messages": 1,
        }
        if message_timeout_ms:
            # a source that may die meanwhile: give its syncs up this soon
            self._config["message.timeout.ms"] = message_timeout_ms
        self._producer: Producer | None = None
        self._created = False

    def create(self) -> None:
        """Create the topic (once; done by the first :meth:`write` otherwise)."""
        if not self._created:
            create_syncs_topic(self.bootstrap, self.topic)
            self._created = True

    def write(self, syncs: Sequence[OffsetSync], timeout_s: float = 30.0) -> None:
        """Write ``syncs`` in order and wait until the cluster took them
        (``TimeoutError`` if it did not answer in ``timeout_s``)."""
        if not syncs:
            return
        self.create()
        if self._producer is None:
            self._producer = Producer(self._config, logger=client_log(self.bootstrap))
        for sync in syncs:
            key, value = sync.encode()
            self._producer.produce(self.topic, key=key, value=value, partition=0)
        left = self._producer.flush(timeout_s)
        if left:
            raise TimeoutError(f"{left} offset syncs not delivered in {timeout_s}s")

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is pending (for at most ``timeout_s``) and drop the client."""
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None


@dataclass
class Mm2Copy:
    """How a feed's records on ``source`` are copied to ``mirror`` (see the
    module's docstring). ``syncs_cluster=None``: no offset syncs (an
    offset-preserving mirror has no use for them)."""

    #: Bootstrap of the cluster copied from (the feed's producers write there).
    source: str
    #: Bootstrap of the mirror cluster.
    mirror: str
    #: The remote topic on the mirror.
    topic: str
    #: Bootstrap of the cluster holding the offset syncs (MM2's default: the
    #: source), or None for no syncs.
    syncs_cluster: str | None
    syncs_topic: str
    #: ``__earlier__`` records per partition before the copy.
    shifts: Sequence[int] = ()
    #: Every this many chunks, a chunk copied in a transaction, whose commit
    #: marker takes an offset per partition after it (0: never).
    marker_every: int = 0
    offset_lag_max: int = OFFSET_LAG_MAX
    #: How often delayed syncs are written (MM2: ``offset.flush.interval.ms``).
    commit_interval_s: float = COMMIT_INTERVAL_S
    #: Every sync written, in order...
    syncs: list[OffsetSync] = field(default_factory=list)
    #: ...and when (``time.time()``, once the source acknowledged it).
    synced_at: list[float] = field(default_factory=list)
    _writer: OffsetSyncWriter = field(init=False)
    _copies: SequenceProducer | None = field(default=None, init=False)
    _in_transactions: SequenceProducer | None = field(default=None, init=False)
    _sync_topic: OffsetSyncsTopic | None = field(default=None, init=False)
    _chunks: int = field(default=0, init=False)
    _last_commit: float = field(default_factory=time.monotonic, init=False)

    def __post_init__(self) -> None:
        self._writer = OffsetSyncWriter(self.offset_lag_max)

    def prepare(self, partitions: int) -> None:
        """Create the remote topic (filled with its earlier records) and the
        offset-syncs topic."""
        create_topics(self.mirror, {self.topic: partitions})
        earlier = SequenceProducer(self.mirror)
        try:
            for p, n in enumerate(self.shifts):
                for _ in range(n):
                    earlier.raw(self.topic, p, EARLIER_KEY)
            earlier.flush()
        finally:
            earlier.close()
        if self.syncs_cluster is not None:
            self._sync_topic = OffsetSyncsTopic(self.syncs_cluster, self.syncs_topic)
            self._sync_topic.create()

    def copy(
        self,
        source_topic: str,
        partitions: int,
        label: str,
        seqs: range,
        timestamp_ms: int,
        upstream: dict[int, int],
    ) -> None:
        """Copy one chunk the feed produced (``upstream``: seq -> its offset on
        the source) and write the syncs MM2 would."""
        self._chunks += 1
        with_marker = bool(self.marker_every) and self._chunks % self.marker_every == 0
        if with_marker:
            if self._in_transactions is None:
                self._in_transactions = SequenceProducer(self.mirror, transactional=True)
            producer = self._in_transactions
            producer.begin()
        else:
            if self._copies is None:
                self._copies = SequenceProducer(self.mirror)
            producer = self._copies
        downstream: dict[int, int] = {}
        producer.produce(
            self.topic,
            partitions,
            label,
            seqs,
            timestamp_ms=timestamp_ms,
            on_delivery=offsets_into(downstream),
        )
        if with_marker:
            producer.commit()
        producer.flush()
        if self.syncs_cluster is None:
            return
        due = []
        for seq in seqs:  # each partition in the source's order
            sync = self._writer.copied(
                source_topic, seq % partitions, upstream[seq], downstream[seq]
            )
            if sync is not None:
                due.append(sync)
        if time.monotonic() - self._last_commit >= self.commit_interval_s:
            due += self._writer.commit()
            self._last_commit = time.monotonic()
        self._write(due)

    def _write(self, syncs: list[OffsetSync]) -> None:
        if not syncs or self.syncs_cluster is None:
            return
        if self._sync_topic is None:
            self._sync_topic = OffsetSyncsTopic(self.syncs_cluster, self.syncs_topic)
        self._sync_topic.write(syncs)
        self.syncs.extend(syncs)
        self.synced_at.extend([time.time()] * len(syncs))

    def known_by(self, when: float, tail_s: float = TAIL_S) -> int:
        """How many syncs a coordinator surely read by ``when``
        (``time.time()``): those written ``tail_s`` before."""
        return sum(1 for t in self.synced_at if t <= when - tail_s)

    def fence(self, partitions: int) -> None:
        """Fence the remote topic (tansu's watermarks; not a copied record)."""
        fence(self.mirror, self.topic, partitions)

    def close(self) -> None:
        for producer in (self._copies, self._in_transactions):
            if producer is not None:
                producer.close()
        self._copies = self._in_transactions = None
        if self._sync_topic is not None:
            self._sync_topic.close()
            self._sync_topic = None


#: Failover strategies a :class:`MirroredStream` can be set up for.
STRATEGIES = ("timestamp", "identity", "mm2")


@dataclass
class MirroredStream:
    """A topic on a source cluster and its mirror, set up for a failover
    ``strategy`` (:func:`mirrored_stream`): ``timestamp`` and ``identity``,
    a mirror with the same topic, offsets and record times (the feed writes
    both); ``mm2``, MM2's default replication (remote topic
    ``<source_id>.<topic>``, shifted offsets, offset syncs on the source named
    for the mirror's id, :class:`Mm2Copy`)."""

    strategy: str
    source_id: str
    source: str
    mirror_id: str
    mirror: str
    topic: str
    partitions: int
    copy: Mm2Copy | None = None

    @property
    def mirror_topic(self) -> str:
        return self.copy.topic if self.copy is not None else self.topic

    def document(self, name: str, **extra: Any) -> dict[str, Any]:
        """The stream document: the source ACTIVE, the mirror STANDBY (with
        its ``mm2`` block for ``mm2``)."""
        doc = stream_doc(
            name,
            {
                self.source_id: (self.source, [self.topic]),
                self.mirror_id: (self.mirror, [self.mirror_topic]),
            },
            states={self.mirror_id: "STANDBY"},
            **extra,
        )
        if self.copy is not None:
            doc["clusters"][self.mirror_id]["mm2"] = {"source": self.source_id}
        return doc

    def feed(self, label: str, **options: Any) -> Feed:
        """A feed of this topic (``Feed``'s options): it writes the source and
        the mirror, or the source with the mirror copying (``mm2``)."""
        targets = [self.source] if self.copy is not None else [self.source, self.mirror]
        return Feed(targets, self.topic, self.partitions, label, mirror=self.copy, **options)


def mirrored_stream(
    strategy: str,
    source: tuple[str, str],
    mirror: tuple[str, str],
    topic: str,
    partitions: int,
    *,
    shifts: Sequence[int] = (),
    marker_every: int = 0,
    offset_lag_max: int = OFFSET_LAG_MAX,
) -> MirroredStream:
    """Create the topics of a :class:`MirroredStream`; ``source`` and
    ``mirror`` are (cluster id, bootstrap). ``shifts``, ``marker_every`` and
    ``offset_lag_max``: the ``mm2`` mirror's (:class:`Mm2Copy`)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    (source_id, source_bs), (mirror_id, mirror_bs) = source, mirror
    create_topics(source_bs, {topic: partitions})
    copy = None
    if strategy == "mm2":
        copy = Mm2Copy(
            source_bs,
            mirror_bs,
            remote_topic(ReplicationPolicy.DEFAULT, source_id, topic),
            syncs_cluster=source_bs,
            syncs_topic=offset_syncs_topic(mirror_id),
            shifts=shifts,
            marker_every=marker_every,
            offset_lag_max=offset_lag_max,
        )
        copy.prepare(partitions)
    else:
        create_topics(mirror_bs, {topic: partitions})
    return MirroredStream(
        strategy, source_id, source_bs, mirror_id, mirror_bs, topic, partitions, copy
    )
