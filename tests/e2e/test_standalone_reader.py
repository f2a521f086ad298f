"""The standalone reader (``multikafka.Reader``, no Spark) over real etcd,
tansu clusters and the coordinator: a failover in the middle of a read, a
migration with a drain, and resuming from a saved position; sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import pyarrow as pa
import pytest

from multikafka import Reader
from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import Feed, create_topics
from multikafka.reader_agent import SCHEMA
from tests.conftest import Cluster, KafkaClusters
from tests.helpers import (
    assert_exactly_once,
    eventually,
    eventually_async,
    produce_sequence,
    stream_doc,
    uid,
)

pytestmark = pytest.mark.integration


def keyed(batches: Iterable[pa.RecordBatch]) -> list[tuple[str, str]]:
    """(cluster, key) of every record."""
    out: list[tuple[str, str]] = []
    for b in batches:
        keys = [k.decode() for k in b.column("key").to_pylist()]
        out.extend(zip(b.column("cluster").to_pylist(), keys, strict=True))
    return out


class Background(threading.Thread):
    """Reads with one Reader until stopped, committing after each batch;
    ``batches()`` (or ``abatches()`` in an event loop of its own, with
    ``use_async``) ends after a short idle time and is called again, so
    every round also goes on from the reader's position."""

    def __init__(self, reader: Reader, *, use_async: bool = False) -> None:
        super().__init__(daemon=True)
        self.reader = reader
        self.use_async = use_async
        self.batches: list[pa.RecordBatch] = []
        self.rounds = 0
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.use_async:
                asyncio.run(self._read_async())
                return
            while not self._halt.is_set():
                self.rounds += 1
                for batch in self.reader.batches(idle_timeout_s=0.5):
                    self.batches.append(batch)
                    self.reader.commit()
        except BaseException as exc:
            self.error = exc

    async def _read_async(self) -> None:
        while not self._halt.is_set():
            self.rounds += 1
            async for batch in self.reader.abatches(idle_timeout_s=0.5):
                self.batches.append(batch)
                self.reader.commit()

    def rows(self) -> list[tuple[str, str]]:
        return keyed(list(self.batches))

    def finish(self) -> None:
        self._halt.set()
        self.join(30)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_failover_in_the_middle_reads_every_record_once(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters, use_async: bool
) -> None:
    """A reader on two clusters (primary ACTIVE, mirror STANDBY, fed the same
    records); the primary dies mid-stream and the stream fails over with a
    1 s margin: every record read once (the reader goes on right after the
    mirror's copy of the last record it read), and the reader never
    restarted."""
    primary = kafka.private("primary")
    (shared,) = kafka.shared(1)
    mirror = Cluster("mirror", shared.bootstrap, shared.broker)
    topic = uid("t")
    for c in (primary, mirror):
        create_topics(c.bootstrap, {topic: 2})
    name = uid("sfo")
    doc = stream_doc(
        name, {"primary": (primary.bootstrap, [topic]), "mirror": (mirror.bootstrap, [topic])}
    )
    doc["clusters"]["mirror"]["state"] = "STANDBY"
    admin.put_stream(doc)
    feed = Feed([primary.bootstrap, mirror.bootstrap], topic, 2, "r", chunk=40, pause_s=0.05)
    with Reader(coordinator.address, name, starting_offsets="earliest") as reader:
        assert reader.schema == SCHEMA
        bg = Background(reader, use_async=use_async)
        bg.start()
        feed.start()
        try:
            eventually(lambda: sum(c == "primary" for c, _ in bg.rows()) > 500, timeout_s=60)
            cut = feed.route([mirror.bootstrap])
            primary.require_process().process.kill()
            admin.failover(
                name, "primary", "mirror", strategy="timestamp", margin_ms=1000, reason="test"
            )
            sent = len(feed.sent)
            eventually(lambda: len(feed.sent) > sent + 400, timeout_s=30)
            total = feed.stop()
            eventually(
                lambda: len({k for _, k in bg.rows() if k.startswith("r:")}) == total, timeout_s=90
            )
        finally:
            feed.stop()
            bg.finish()
        rows = bg.rows()
        assert_exactly_once([k for _, k in rows], {"r": total})
        assert {c for c, _ in rows} == {"primary", "mirror"}
        # the mirror's copies of records sent before the cut were read too
        assert any(c == "mirror" and int(k[2:]) < cut for c, k in rows if k.startswith("r:"))
        translated = [e.detail for e in admin.history(name) if e.kind == "translated"]
        assert translated
        assert all("matched the last" in d for d in translated)
        # The position moved on from the primary to the mirror.
        assert set(reader.offsets) == {"mirror"}


async def test_async_reader_follows_a_migration_and_resumes_where_it_left(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    """An async reader reads ``old``, saves its position and closes; the
    stream migrates to ``new`` (old drained) meanwhile; a second reader given
    that position reads the rest: every record exactly once, and the drain
    completes on its commits."""
    old, new = kafka.shared(2)
    topic = uid("t")
    for c in (old, new):
        create_topics(c.bootstrap, {topic: 2})
    name = uid("smig")
    query = uid("q")
    produce_sequence(old.bootstrap, topic, 2, "old", range(300))
    admin.put_stream(stream_doc(name, {"old": (old.bootstrap, [topic])}))

    first: list[pa.RecordBatch] = []
    async with Reader(coordinator.address, name, starting_offsets="earliest", query_id=query) as r:
        async for batch in r.abatches(idle_timeout_s=1.0):
            first.append(batch)
            r.commit()
        saved = r.offsets
    assert_exactly_once([k for _, k in keyed(first)], {"old": 300})
    assert saved == {"old": {topic: [151, 151]}}  # 150 records and a fence per partition

    admin.put_stream(
        stream_doc(name, {"old": (old.bootstrap, [topic]), "new": (new.bootstrap, [topic])})
    )
    produce_sequence(old.bootstrap, topic, 2, "old", range(300, 500))
    admin.drain(name, "old")
    produce_sequence(new.bootstrap, topic, 2, "new", range(300))

    second: list[pa.RecordBatch] = []
    async with Reader(coordinator.address, name, starting_offsets=saved, query_id=query) as r:
        async for batch in r.abatches(idle_timeout_s=2.0):
            second.append(batch)
            r.commit()

        def drained() -> bool:
            return any(e.kind == "drain-complete" for e in admin.history(name))

        await eventually_async(drained, timeout_s=30)
        assert set(r.offsets) == {"new"}
    assert_exactly_once([k for _, k in keyed(first + second)], {"old": 500, "new": 300})
    assert {c for c, _ in keyed(second)} == {"old", "new"}
    # The coordinator saw the query leave the old cluster, as a Spark query's.
    offsets = {q.query_id: dict(q.offsets) for q in admin.queries()}[query]
    assert offsets
    assert not any(s.startswith("old/") for s in offsets)
