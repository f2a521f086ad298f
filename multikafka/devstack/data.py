"""Test data on real brokers: topics, sequence-numbered records, fences.

Records are keyed ``"<label>:<seq>"`` so a reader can check that every
sequence number arrived exactly once. Volume is produced in batches; each
partition then gets one single-record *fence* (key ``__fence__``), which makes
tansu's high watermark right for everything before it (see ARCHITECTURE.md).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

FENCE_KEY = b"__fence__"

#: Client settings of every stream on the dev stack's tansu brokers: tansu
#: answers a fetch only after the full fetch.wait.max.ms even when it has data
#: (ARCHITECTURE.md). Not a product default.
TANSU_PROPERTIES = {"fetch.wait.max.ms": "10"}


def stream_doc(
    name: str,
    clusters: Mapping[str, tuple[str, list[str]]],
    *,
    states: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A stream document for the dev stack: ``clusters`` maps id ->
    (bootstrap, topics); ``states`` sets clusters' states (default ACTIVE)."""
    doc: dict[str, Any] = {
        "name": name,
        "clusters": {
            cid: {
                "bootstrap_servers": bs,
                "topics": list(topics),
                "properties": dict(TANSU_PROPERTIES),
            }
            for cid, (bs, topics) in clusters.items()
        },
    }
    for cid, state in (states or {}).items():
        doc["clusters"][cid]["state"] = state
    doc.update(extra)
    return doc


def sequence_report(
    keys: Iterable[str], expected: Mapping[str, int]
) -> tuple[list[str], dict[str, int]]:
    """Missing keys and duplicated keys (key -> count) among ``keys`` for
    ``expected`` labels with sequence numbers 0..n-1. Fence keys are ignored."""
    fence_key = FENCE_KEY.decode()
    counts = Counter(k for k in keys if not k.startswith(fence_key))
    missing = [
        f"{label}:{s}"
        for label, n in expected.items()
        for s in range(n)
        if f"{label}:{s}" not in counts
    ]
    duplicated = {k: c for k, c in counts.items() if c > 1}
    return missing, duplicated


def create_topics(bootstrap: str, topics: Mapping[str, int], timeout_s: float = 15.0) -> None:
    """Create ``{topic: partitions}`` (topics that exist already are fine)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, n, 1) for t, n in topics.items()], request_timeout=timeout_s
    )
    for topic, fut in futures.items():
        try:
            fut.result(timeout_s)
        except KafkaException as exc:
            if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        _wait_topic(admin, topic, topics[topic], timeout_s)


def _wait_topic(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=timeout_s).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) >= partitions:
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {topic} did not appear with {partitions} partitions")


class SequenceProducer:
    """Produces ``"<label>:<seq>"`` records round-robin over partitions."""

    def __init__(self, bootstrap: str, *, batched: bool = True, value_size: int = 64) -> None:
        config: dict[str, str | int] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
        if batched:
            config.update({"batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000})
        else:
            config["batch.num.messages"] = 1
        self._producer = Producer(config)
        self._pad = b"x" * max(value_size - 16, 0)

    def produce(
        self,
        topic: str,
        partitions: int,
        label: str,
        seqs: Iterable[int],
        *,
        timestamp_ms: int | None = None,
        headers: bool = False,
    ) -> int:
        n = 0
        for seq in seqs:
            key = f"{label}:{seq}".encode()
            kwargs: dict[str, object] = {"partition": seq % partitions}
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            if headers:
                kwargs["headers"] = [("seq", str(seq).encode())]
            while True:
                try:
                    self._producer.produce(topic, key=key, value=b"%d|" % seq + self._pad, **kwargs)  # type: ignore[arg-type]
                    break
                except BufferError:
                    self._producer.poll(0.05)
            n += 1
        self._producer.poll(0)
        return n

    def flush(self, timeout_s: float = 30.0) -> None:
        left = self._producer.flush(timeout_s)
        if left:
            raise TimeoutError(f"{left} records not delivered in {timeout_s}s")


def fence(bootstrap: str, topic: str, partitions: int) -> None:
    """One single-record batch per partition (makes tansu's watermarks exact)."""
    producer = SequenceProducer(bootstrap, batched=False)
    for p in range(partitions):
        producer._producer.produce(topic, key=FENCE_KEY, value=b"", partition=p)
    producer.flush()


def produce_sequence(
    bootstrap: str, topic: str, partitions: int, label: str, seqs: Iterable[int]
) -> int:
    """Produce records ``label:seq`` in batches, then fence every partition."""
    producer = SequenceProducer(bootstrap)
    n = producer.produce(topic, partitions, label, seqs)
    producer.flush()
    fence(bootstrap, topic, partitions)
    return n


class Feed(threading.Thread):
    """Produces ``label:seq`` records in chunks with pauses until stopped or
    ``limit`` is reached. Each chunk goes to every current target cluster with
    the same record timestamp, which is what a timestamp-preserving mirror
    does; :meth:`route` moves producers (and mirrors) between clusters.

    ``sent`` lists ``(seq, timestamp_ms)`` of every record produced.
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
    ) -> None:
        super().__init__(name=f"feed-{label}", daemon=True)
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

    def route(self, targets: list[str]) -> int:
        """From the next chunk on, produce to ``targets`` only. Returns the
        first sequence number that goes to the new targets."""
        with self._lock:
            self._targets = list(targets)
            for gone in set(self._producers) - set(targets):
                # Nothing is pending (every chunk is flushed): dropping the
                # producer stops it from reconnecting to a dead cluster.
                del self._producers[gone]
            return len(self.sent)

    def margin_window(
        self, read_from_primary: Iterable[int], cut: int, margin_ms: int, slack_ms: int = 1000
    ) -> set[int]:
        """Sequence numbers a timestamp failover may read twice: those sent
        within ``margin_ms`` before the last record read from the primary
        among those sent before ``cut`` (see :meth:`route`), plus ``slack_ms``
        because tansu looks times up by append time, not create time."""
        sent = dict(self.sent)
        before = [sent[s] for s in read_from_primary if s < cut]
        if not before:
            return set()
        last = max(before)
        return {s for s, ts in self.sent if last - margin_ms - slack_ms <= ts <= last}

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop producing, fence the current targets; returns records sent."""
        self._stop_event.set()
        self.join(timeout_s)
        if self.error is not None:
            raise RuntimeError("feed failed") from self.error
        self._fence()
        return len(self.sent)

    def _fence(self) -> None:
        with self._lock:
            if not self._fenced:
                for bootstrap in self._targets:
                    fence(bootstrap, self.topic, self.partitions)
                self._fenced = True

    def run(self) -> None:
        seq = 0
        try:
            while not self._stop_event.is_set() and (self.limit is None or seq < self.limit):
                n = self.chunk if self.limit is None else min(self.chunk, self.limit - seq)
                ts = int(time.time() * 1000)
                seqs = range(seq, seq + n)
                with self._lock:  # a route change waits for the chunk in flight
                    for bootstrap in self._targets:
                        producer = self._producers.get(bootstrap)
                        if producer is None:
                            producer = self._producers[bootstrap] = SequenceProducer(bootstrap)
                        producer.produce(
                            self.topic, self.partitions, self.label, seqs, timestamp_ms=ts
                        )
                        producer.flush()
                    self.sent.extend((s, ts) for s in seqs)
                seq += n
                self._stop_event.wait(self.pause_s)
            if self.limit is not None and seq >= self.limit:
                self._fence()  # all produced: make the end readable at once
        except BaseException as exc:
            self.error = exc
