"""The chaos soak: one Spark query reads a stream for some minutes while a
seeded random schedule of faults hits every part of the system
(:mod:`.chaos`: its world and its faults), then checks that nothing was lost,
no failover read a record twice (only a drain that overlapped an activation
may, within its overlap, and a cluster that holds a record twice), the query
never restarted, and the coordinators did not grow.

:func:`run_soak` runs it and returns everything it saw; the benchmark
``benchmarks/soak.py`` (20 minutes, with a report and a plot) and the test
``tests/e2e/test_soak.py`` (3 minutes) call it.

The schedule (``random.Random(seed)``) goes through the fault kinds in
rounds, each round in a random order, with random gaps: the leader killed
(``kill -9``, then restarted) or frozen (SIGSTOP past its lease, then
SIGCONT), an etcd member killed and restarted, a broker killed (the ACTIVE
cluster's and a standby's in turn; memory storage, so its cluster is lost:
failed over from if ACTIVE, removed, and replaced by a fresh cluster made an
exact mirror, as a STANDBY), a Spark Python worker killed (Spark retries the
task), failovers (``timestamp``, ``identity`` and ``mm2`` in turn, each when
a standby can take it without a loss; ``mm2`` with the offset syncs
:class:`~.chaos.MirrorSyncFeed` writes as MM2 would), migrations (drain the
ACTIVE cluster, activate a standby), drains overlapping an activation, and
metadata edits (the document put again with a property changed).

A record not read is shown with what was around it (when it was sent and to
which clusters, where it is now, where its neighbours were read, the batches
and faults then: ``lost_detail``).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import statistics
import threading
import time
from array import array
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from multikafka.core.retry import poll
from multikafka.devstack.chaos import (
    LABEL,
    MARGIN_MS,
    PARTITIONS,
    QUERY_ID,
    STRATEGIES,
    STREAM,
    TOPIC,
    Event,
    Faults,
    World,
    offset_of,
)
from multikafka.devstack.counts import ReadCounts, split_key
from multikafka.devstack.feed import is_stream_key
from multikafka.devstack.processes import temp_work_dir

#: Every kind of fault the schedule draws from (each a method of Faults).
FAULTS = (
    "leader_kill",
    "leader_pause",
    "etcd_kill",
    "broker_kill",
    "worker_kill",
    "failover",
    "migration",
    "drain",
    "metadata_edit",
)
#: Seconds before the first fault, and at the end without faults.
WARMUP_S = 20.0
TAIL_S = 10.0
#: How much a coordinator replica may grow in one role (leader or standby)
#: between its first settled sample and its last: more is a leak. (Threads
#: and fds of a process on one etcd and three clusters: ~28 and ~37 leading,
#: ~11 and ~18 standing by; RSS ~140 MiB.)
GROWTH_ALLOWED = {"os_threads": 8, "fds": 16, "rss_mib": 64.0}
#: Seconds after a replica started, or its role changed, before it is sampled
#: for growth (a new leader opens its clients).
SETTLE_S = 10.0
#: tansu looks times up by append time, not create time (Feed.margin_window).
SLACK_MS = 1000


@dataclass(frozen=True)
class Planned:
    at_s: float
    kind: str
    pick: int


def schedule(seed: int, minutes: float) -> list[Planned]:
    """Rounds of every fault kind in a random order, with random gaps (a
    shorter soak, shorter gaps, so that it still meets every kind)."""
    rng = random.Random(seed)
    mean_gap = 15.0 if minutes > 5 else 6.0
    end = minutes * 60 - TAIL_S
    t = WARMUP_S
    out: list[Planned] = []
    while True:
        kinds = list(FAULTS)
        rng.shuffle(kinds)
        for kind in kinds:
            t += rng.uniform(0.5, 1.5) * mean_gap
            if t > end:
                return out
            out.append(Planned(round(t, 1), kind, rng.randrange(1 << 30)))


class Reads:
    """What the query read: how often each sequence number, and from which
    cluster (``foreachBatch`` runs here, in the driver)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = ReadCounts()
        self.by_cluster: dict[str, array[int]] = {}
        self.distinct = 0
        self.duplicates = 0
        self.batches = 0
        self._low = 0  # every sequence number below was read
        # Where each sequence number was first read (cluster index, offset),
        # and per batch the offsets read per cluster and partition: what
        # :meth:`Soak.lost_detail` shows around a record that was not read.
        self.clusters: dict[str, int] = {}
        self.first_cluster = bytearray()
        self.first_offset = array("q")
        self.ranges: list[tuple[int, float, dict[tuple[str, int], tuple[int, int, int]]]] = []
        #: Records read twice from one cluster, at two offsets: a cluster that
        #: holds them twice (a mirror's re-sent batch, a producer's retry),
        #: not a failover's doing.
        self.held_twice: set[int] = set()

    def on_batch(self, df: Any, batch_id: int) -> None:
        rows = df.selectExpr("cluster", "partition", "offset", "cast(key as string) as k").collect()
        with self.lock:
            ranges: dict[tuple[str, int], tuple[int, int, int]] = {}
            for r in rows:
                cluster, partition, offset = r["cluster"], r["partition"], r["offset"]
                lo, hi, n = ranges.get((cluster, partition), (offset, offset, 0))
                ranges[(cluster, partition)] = (min(lo, offset), max(hi, offset), n + 1)
                key = r["k"]
                if not is_stream_key(key):
                    continue  # a fence
                label, seq = split_key(key)
                before = self.counts.add_seq(label, seq)
                if seq >= len(self.first_offset):
                    grow = seq + 1 - len(self.first_offset) + 65536
                    self.first_cluster.extend(bytes(grow))
                    self.first_offset.extend([-1] * grow)
                if before:
                    self.duplicates += 1
                    first = list(self.clusters)[self.first_cluster[seq]]
                    if first == cluster and self.first_offset[seq] != offset:
                        self.held_twice.add(seq)  # the cluster itself has it twice
                else:
                    self.distinct += 1
                    self.first_cluster[seq] = self.clusters.setdefault(cluster, len(self.clusters))
                    self.first_offset[seq] = offset
                self.by_cluster.setdefault(cluster, array("q")).append(seq)
            self.ranges.append((batch_id, time.time(), ranges))
            self.batches += 1

    def first_read(self, seq: int) -> tuple[str, int] | None:
        """(cluster, offset) where ``seq`` was first read; None if never."""
        if not self.counts.count(LABEL, seq):
            return None
        return list(self.clusters)[self.first_cluster[seq]], self.first_offset[seq]

    def first_unread(self) -> int:
        with self.lock:
            while self.counts.count(LABEL, self._low):
                self._low += 1
            return self._low


class Soak:
    """One soak: its world, the query, the schedule and what happened."""

    def __init__(self, spark: Any, work_dir: Path, seed: int, minutes: float) -> None:
        self.spark = spark
        self.seed = seed
        self.minutes = minutes
        self.plan = schedule(seed, minutes)
        self.world = World(work_dir, spark)
        self.reads = Reads()
        self.events: list[Event] = []
        self.timeline: list[dict[str, float]] = []
        self.usage: list[dict[str, Any]] = []
        self.run_ids: list[str] = []
        self.query: Any = None
        self.t0 = 0.0
        self.t0_wall = 0.0
        self._stop = threading.Event()

    # -- running ----------------------------------------------------------------------

    def start(self, work_dir: Path) -> None:
        self.world.start()
        self.query = (
            self.spark.readStream.format("multikafka")
            .option("coordinator", self.world.addresses)
            .option("stream", STREAM)
            .option("startingOffsets", "earliest")
            .option("queryId", QUERY_ID)
            .load()
            .writeStream.foreachBatch(self.reads.on_batch)
            .option("checkpointLocation", str(work_dir / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        self.run_ids.append(str(self.query.runId))
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        threading.Thread(target=self._monitor, name="soak-monitor", daemon=True).start()

    def _monitor(self) -> None:
        """Once a second: records sent, read, read twice; the query's run id;
        every 5 s the replicas' threads, fds and RSS."""
        tick = 0
        while not self._stop.wait(1.0):
            sent = len(self.world.feed.sent) if self.world.started else 0
            with self.reads.lock:
                read, dups = self.reads.distinct, self.reads.duplicates
            t = time.monotonic() - self.t0
            self.timeline.append({"t": t, "sent": sent, "read": read, "duplicates": dups})
            try:
                run_id = str(self.query.runId)
                if run_id != self.run_ids[-1]:
                    self.run_ids.append(run_id)
            except Exception:
                pass
            if tick % 5 == 0:
                for u in self.world.usage():
                    self.usage.append({"t": t, **u})
            tick += 1

    def reads_on(self, more: int, timeout_s: float) -> None:
        target = self.reads.distinct + more
        poll(
            lambda: self.reads.distinct >= target,
            timeout_s=timeout_s,
            what=f"{more} more records read",
        )

    def run(self, progress: Progress) -> None:
        faults = Faults(self.world, self.t0)
        total = self.minutes * 60
        task = progress.add_task("soak", total=int(total), note="warm-up")
        end = self.t0 + total - TAIL_S
        for planned in self.plan:
            while time.monotonic() - self.t0 < planned.at_s:
                self._progress(progress, task)
                time.sleep(0.5)  # the schedule's gap (faults come at planned times)
            if time.monotonic() > end:
                break
            progress.update(task, note=f"{planned.kind} …")
            try:
                event = self._fault(faults, planned)
                event.end_s = time.monotonic() - self.t0
                self.reads_on(200, 120)
            except Exception as exc:
                event = Event(planned.kind, planned.at_s, time.monotonic() - self.t0)
                event.ok, event.error = False, f"{type(exc).__name__}: {exc}"
                self.events.append(event)
                progress.console.print(f"[red]{planned.kind} failed: {event.error}")
                break
            self.events.append(event)
            progress.console.print(
                f"{event.start_s:7.1f} s  {event.kind:<14} {event.detail}"
                f"  ({event.end_s - event.start_s:.1f} s)"
            )
        while time.monotonic() - self.t0 < total:
            self._progress(progress, task)
            time.sleep(0.5)
        self._progress(progress, task)

    def _fault(self, faults: Faults, planned: Planned) -> Event:
        pick = planned.pick
        if planned.kind in ("failover", "broker_kill"):
            return getattr(faults, planned.kind)(pick, self.reads.first_unread())  # type: ignore[no-any-return]
        return getattr(faults, planned.kind)(pick)  # type: ignore[no-any-return]

    def _progress(self, progress: Progress, task: TaskID) -> None:
        t = time.monotonic() - self.t0
        last = self.timeline[-1] if self.timeline else {"sent": 0, "read": 0, "duplicates": 0}
        note = (
            f"{len(self.events)} faults, read {last['read']:,.0f} of {last['sent']:,.0f}, "
            f"dup {last['duplicates']:,.0f}"
        )
        progress.update(task, completed=min(int(t), int(self.minutes * 60)), note=note)

    def finish(self) -> int:
        """Stop the feed (fencing the clusters it writes) and wait until every
        record sent was read; returns how many were sent."""
        sent = self.world.feed.stop()
        # On a timeout the check below says how many are missing.
        with contextlib.suppress(TimeoutError):
            poll(
                lambda: self.reads.distinct >= sent,
                timeout_s=180,
                what="every record read",
                interval_s=0.5,
            )
        time.sleep(2)  # a late batch would still show a duplicate
        self._stop.set()
        for u in self.world.usage():
            self.usage.append({"t": time.monotonic() - self.t0, **u})
        return sent

    # -- checking ---------------------------------------------------------------------

    def verify(self, sent: int) -> dict[str, Any]:
        feed = self.world.feed
        report = self.reads.counts.report({LABEL: sent})
        missing = [split_key(k)[1] for k in report.missing]
        lost = report.lost
        extra = len(report.unexpected)
        # seq -> times read again
        duplicated = {
            seq: c - 1 for k, c in report.duplicated.items() if (seq := split_key(k)[1]) < sent
        }
        held = {s: c for s, c in duplicated.items() if s in self.reads.held_twice}
        windows = []
        allowed: set[int] = set(held)
        for e in self.events:
            window = self._window(e)
            by_time = e.bound is not None and e.bound[0] == "time"
            if by_time:
                allowed |= window  # a drain overlapping an activation reads both
            if e.strategy or e.kind in ("migration", "drain"):
                windows.append(
                    {
                        "at_s": round(e.start_s, 1),
                        "kind": e.kind,
                        "strategy": e.strategy,
                        "detail": e.detail,
                        "note": e.note,
                        # a failover reads nothing twice: its window (the
                        # margin before the last record read, where a
                        # fallback to the estimate would read twice) shows
                        # what it did
                        "bound": len(window) if by_time else 0,
                        "window": len(window),
                        "duplicates": sum(
                            c for s, c in duplicated.items() if s in window and s not in held
                        ),
                    }
                )
        outside = sum(c for s, c in duplicated.items() if s not in allowed)
        syncs = self.world.syncs
        q = self.query
        exception = q.exception() if q.isActive else "query not active"
        growth = coordinator_growth(self.usage, self.minutes * 60)
        checks = {
            "lost": lost == 0,
            "nothing read that was not sent": extra == 0,
            "every record delivered to every cluster": not feed.undelivered,
            "MM2 offset syncs written throughout": syncs is not None
            and syncs.error is None
            and syncs.written > 0,
            "no failover read a record twice": outside == 0,
            "query never restarted": q.isActive
            and exception is None
            and len(set(self.run_ids)) == 1
            and str(q.runId) == self.run_ids[0],
            "coordinators did not grow": growth["ok"],
            "every fault recovered": all(e.ok for e in self.events),
        }
        return {
            "records": sent,
            "lost": lost,
            "lost_detail": [self.lost_detail(seq) for seq in missing[:10]],
            "undelivered": len(feed.undelivered),
            "mm2_syncs_written": syncs.written if syncs is not None else 0,
            "read_not_sent": extra,
            "duplicates": sum(duplicated.values()),
            "duplicates_held_by_clusters": sum(held.values()),
            "duplicates_outside_bounds": outside,
            "failovers": windows,
            "query": {
                "run_ids": self.run_ids,
                "active": bool(q.isActive),
                "exception": None if exception is None else str(exception),
                "batches": self.reads.batches,
            },
            "growth": growth,
            "checks": checks,
            "ok": all(checks.values()),
        }

    def lost_detail(self, seq: int) -> dict[str, Any]:
        """Around a record that was not read: when it was sent and to which
        clusters, where it is now, where its neighbours in its partition were
        read, the batches that read that partition then, and the faults."""
        feed = self.world.feed
        partition = seq % PARTITIONS
        sent_s = feed.sent[seq][1] / 1000 - self.t0_wall
        targets = next(t for at, t in reversed(feed.routes) if at <= seq)
        names = self.world.names
        near = [
            (
                batch,
                round(t - self.t0_wall, 2),
                {c: r for (c, p), r in ranges.items() if p == partition},
            )
            for batch, t, ranges in self.reads.ranges
            if abs(t - self.t0_wall - sent_s) <= 5
        ]
        return {
            "seq": seq,
            "partition": partition,
            "sent_s": round(sent_s, 2),
            "sent_to": [names.get(b, b) for b in targets],
            "undelivered": [u for u in feed.undelivered if u[0] == seq],
            "now_at": {
                m.id: offset_of(m.broker.bootstrap, TOPIC, partition, f"{feed.label}:{seq}")
                for m in self.world.members
            },
            "neighbours_read_at": {
                d: self.reads.first_read(seq + d * PARTITIONS) for d in (-3, -2, -1, 1, 2, 3)
            },
            "batches": near,
            "faults": [asdict(e) for e in self.events if e.start_s - 10 <= sent_s <= e.end_s + 10],
        }

    def _window(self, e: Event) -> set[int]:
        feed = self.world.feed
        if e.bound is None:
            return set()
        if e.bound[0] == "margin":
            _, cluster, cut, margin = e.bound[:4]
            return feed.margin_window(self.reads.by_cluster.get(cluster, ()), cut, margin)
        _, lo, hi = e.bound[:3]
        return {s for s, ts in feed.sent if lo - SLACK_MS <= ts <= hi + SLACK_MS}


def coordinator_growth(samples: list[dict[str, Any]], total_s: float) -> dict[str, Any]:
    """Per replica process and role (a leader holds clients a standby does
    not): its threads, fds and RSS over its first three settled samples in
    that role (their largest) and over its last three (their median;
    samples every 5 s). The largest at the start: a cluster replaced in the
    stint (a broker killed, a fresh mirror added) closes its clients before
    the new one opens them, and a baseline taken in that moment (45 threads,
    then 37, 41, and 50 for good) read as +9 threads that no leak made.
    Settled: ``SETTLE_S`` after the process started and after its role last
    changed. One must be measured over a third of the soak and all together
    over its length, or the check fails (it would say nothing)."""
    per: list[dict[str, Any]] = []
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        by_pid.setdefault(s["pid"], []).append(s)
    for pid, ss in by_pid.items():
        settled: dict[str, list[dict[str, Any]]] = {}
        changed = ss[0]["t"]
        for prev, s in zip([None, *ss], ss, strict=False):
            if prev is not None and prev["role"] != s["role"]:
                changed = s["t"]
            if s["t"] - changed >= SETTLE_S and s["role"] in ("leader", "standby"):
                settled.setdefault(s["role"], []).append(s)
        for role, rs in settled.items():
            if len(rs) < 2:
                continue
            # The largest of the first three samples and the median of the
            # last three: a leak stays, a moment's spike at the end (a
            # reconnect, gRPC's pool) or dip at the start (clients closed
            # before their replacement opens) does not count.
            base = {k: max(s[k] for s in rs[:3]) for k in GROWTH_ALLOWED}
            last = {k: statistics.median(s[k] for s in rs[-3:]) for k in GROWTH_ALLOWED}
            delta = {k: last[k] - base[k] for k in GROWTH_ALLOWED}
            per.append(
                {
                    "replica": rs[-1]["replica"],
                    "pid": pid,
                    "role": role,
                    "from_s": round(rs[0]["t"], 1),
                    "to_s": round(rs[-1]["t"], 1),
                    "start": {k: round(base[k], 1) for k in GROWTH_ALLOWED},
                    "end": {k: round(last[k], 1) for k in GROWTH_ALLOWED},
                    "growth": {k: round(v, 1) for k, v in delta.items()},
                    "ok": all(delta[k] <= GROWTH_ALLOWED[k] for k in GROWTH_ALLOWED),
                }
            )
    spans = [p["to_s"] - p["from_s"] for p in per]
    # Enough to say something: one span over a third of the soak, and all
    # of them together over its length (leader kills restart processes and
    # pauses move roles: with many, no process keeps one role for half).
    measured = bool(spans) and max(spans) >= total_s / 3 and sum(spans) >= total_s
    return {
        "allowed": GROWTH_ALLOWED,
        "replicas": per,
        "measured": measured,
        "ok": measured and all(p["ok"] for p in per),
    }


def run_soak(
    minutes: float,
    seed: int,
    *,
    spark: Any = None,
    work_dir: Path | None = None,
    keep_logs: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    """Run the soak; returns everything it saw (``result["ok"]``: every
    check passed). Without ``spark``, starts a local one (tasks tried up to 4
    times: a killed Python worker fails its task once). Shows its schedule
    and progress on ``console``."""
    console = console or Console()
    own_spark = spark is None
    if spark is None:
        from multikafka.devstack.spark import local_spark

        with console.status("starting Spark"):
            spark = local_spark("soak", max_failures=4)
    work = work_dir or temp_work_dir("soak-")
    soak = Soak(spark, work, seed, minutes)
    console.print(f"schedule (seed {seed}, {minutes:g} min): {len(soak.plan)} faults")
    for p in soak.plan:
        console.print(f"  {p.at_s:7.1f} s  {p.kind:<14} pick {p.pick}")
    with ExitStack() as cleanup:
        if own_spark:
            cleanup.callback(spark.stop)
        cleanup.callback(soak.world.stop)

        def stop_query() -> None:
            soak._stop.set()
            if soak.query is not None and soak.query.isActive:
                soak.query.stop()

        cleanup.callback(stop_query)
        with console.status("starting etcd (3), clusters (3), coordinators (3), the query"):
            soak.start(work)
        with _progress(console) as progress:
            soak.run(progress)
        with console.status("stopping the feed, reading the rest"):
            sent = soak.finish()
        verdict = soak.verify(sent)
    if work_dir is None:
        if verdict["ok"] and not keep_logs:
            shutil.rmtree(work, ignore_errors=True)
        else:
            console.print(f"logs of every process (kept): {work}")
    kinds: dict[str, int] = {}
    for e in soak.events:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    return {
        "seed": seed,
        "minutes": minutes,
        "strategies": list(STRATEGIES),
        "margin_ms": MARGIN_MS,
        "storage": "tansu memory:// (no postgres feature in its build): a killed broker is a lost cluster",
        "schedule": [asdict(p) for p in soak.plan],
        "faults": kinds,
        "events": [asdict(e) for e in soak.events],
        "timeline": soak.timeline,
        "usage": soak.usage,
        **verdict,
    }


def _progress(console: Console) -> Progress:
    """The soak's progress line (its task carries a ``note``)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
    )
