"""``multikafka demo`` / ``make demo``: the main job, end to end, on the
embedded default stack (etcd, two Kafka-compatible clusters "east" and
"west", the coordinator, a Spark Structured Streaming query into Parquet).

Default story (``--failover``): the stream is read from "east" while "west"
mirrors it (STANDBY). Mid-stream east dies; the stream fails over to west
with timestamp translation. Later east comes back empty and the stream
migrates back (east ACTIVE, west drained). The query never restarts. The
verification at the end: every record produced was read once (lost = 0,
duplicated = 0): the query resumed on west right after west's copy of the
last record it read on each of east's partitions, found by the records'
fingerprints from the strategy's estimate on.

``--strategy`` picks the mirror and the failover's estimate (the rest of
the story is the same):

* ``timestamp`` (default): west has the same topic and record times; the
  estimate is the time of the last record read minus a 2 s margin;
* ``identity``: west is an offset-preserving mirror (same topic, offsets);
* ``mm2``: west is MirrorMaker 2's replica (``multikafka.devstack.mirror``):
  topic ``east.orders`` at shifted offsets, transaction markers, offset syncs
  on east every ``offset.lag.max`` (100) records; the estimate is MM2's
  translation of each position by the newest sync at or before it.

``--no-failover``: both clusters ACTIVE with their own topics; every record
is read exactly once (lost = 0, duplicated = 0).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import PreconditionError
from multikafka.devstack.counts import ReadCounts
from multikafka.devstack.feed import NOT_STREAM_PREFIX, Feed, create_topics, fence
from multikafka.devstack.mirror import STRATEGIES, MirroredStream, mirrored_stream
from multikafka.devstack.processes import EtcdServer, TansuBroker, temp_work_dir
from multikafka.devstack.spark import local_spark
from multikafka.devstack.stack import LocalStack, stream_doc
from multikafka.reader_agent import SPARK_DDL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

console = Console()

PARTITIONS = 3
TOPIC = "orders"
MARGIN_MS = 2000
#: The mm2 mirror's remote topic already held this many records per
#: partition (an earlier replication): its offsets are east's plus these...
MM2_SHIFTS = (1200, 3400, 700)
#: ...plus one per marker, where an exactly-once MM2 commits (every 10 chunks).
MM2_MARKER_EVERY = 10


@dataclass
class Verification:
    """What the sink holds, compared with what was produced."""

    produced: int = 0
    #: cluster -> rows read from it
    read: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    #: a line printed after the verification
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0


def _keys(spark: SparkSession, sink: Path) -> Any:
    from pyspark.sql import functions as F

    if not (sink / "_spark_metadata").exists():
        return None
    rows = spark.read.schema(SPARK_DDL).parquet(str(sink))
    keys = rows.select(
        "cluster", "timestamp", "partition", "offset", F.col("key").cast("string").alias("k")
    )
    return keys.where(~F.col("k").startswith(NOT_STREAM_PREFIX))


def distinct_read(spark: SparkSession, sink: Path) -> int:
    keys = _keys(spark, sink)
    return 0 if keys is None else int(keys.select("k").distinct().count())


def verify(spark: SparkSession, sink: Path, expected: dict[str, int]) -> Verification:
    """Compare the sink with ``expected`` (label -> records ``label:0..n-1``)."""
    keys = _keys(spark, sink)
    result = Verification(produced=sum(expected.values()))
    if keys is None:
        result.lost = result.produced
        return result
    result.read = {r["cluster"]: int(r["count"]) for r in keys.groupBy("cluster").count().collect()}
    counts = ReadCounts()
    for r in keys.groupBy("k").count().collect():
        counts.add(r["k"], int(r["count"]))
    report = counts.report(expected)
    result.lost, result.duplicated = report.lost, report.read_again
    return result


def print_verification(v: Verification, title: str) -> None:
    table = Table(title=title)
    table.add_column("cluster")
    table.add_column("rows read", justify="right")
    for cluster, n in sorted(v.read.items()):
        table.add_row(cluster, f"{n:,}")
    console.print(table)
    status = "[green]OK[/green]" if v.ok else "[red]FAILED[/red]"
    console.print(
        f"{status}  produced {v.produced:,}  read {sum(v.read.values()):,}  "
        f"lost = {v.lost:,}  duplicated = {v.duplicated:,}"
    )
    if v.note:
        console.print(v.note)


def start_stack(work_dir: Path, clusters: tuple[str, ...]) -> LocalStack:
    stack = LocalStack(work_dir, EtcdServer(work_dir))
    try:
        with console.status("starting etcd"):
            stack.etcd.start()
        for name in clusters:
            with console.status(f"starting cluster {name} (tansu)"):
                stack.add_cluster(name)
        with console.status("starting the coordinator"):
            stack.start_coordinator(
                discovery_interval_s=1.0, cluster_timeout_s=1.0, unreachable_backoff_s=1.0
            )
    except BaseException:
        stack.stop()
        raise
    table = Table(title="local stack", show_header=False)
    table.add_row("etcd", stack.etcd.url)
    for name, broker in stack.clusters.items():
        table.add_row(f"cluster {name}", broker.bootstrap)
    table.add_row("coordinator", stack.coordinator_address)
    table.add_row("work dir", str(work_dir))
    console.print(table)
    return stack


def start_query(
    spark: SparkSession, stack: LocalStack, work_dir: Path, *, max_per_trigger: int
) -> StreamingQuery:
    df = (
        spark.readStream.format("multikafka")
        .option("coordinator", stack.coordinator_address)
        .option("stream", "orders")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .option("queryId", "demo")
        .load()
    )
    return (
        df.writeStream.format("parquet")
        .option("path", str(work_dir / "sink"))
        .option("checkpointLocation", str(work_dir / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )


def follow(
    spark: SparkSession,
    query: StreamingQuery,
    feeds: list[Feed],
    total: int,
    sink: Path,
    *,
    timeout_s: float,
    on_tick: Callable[[int, int], str] = lambda produced, read: "",
) -> None:
    """Show progress until the sink holds all ``total`` records; ``on_tick``
    (given the records produced and read so far) acts and returns a note."""
    deadline = time.monotonic() + timeout_s
    read = 0
    last_poll = 0.0
    with Progress(
        TextColumn("[bold]{task.description:>13}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=console,
    ) as progress:
        produced_bar = progress.add_task("produced", total=total, note="")
        read_bar = progress.add_task("read by Spark", total=total, note="")
        while read < total:
            for feed in feeds:
                if feed.error is not None:
                    raise RuntimeError("producer failed") from feed.error
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            produced = sum(len(f.sent) for f in feeds)
            note = on_tick(produced, read)
            if time.monotonic() - last_poll > 1.5:
                read = distinct_read(spark, sink)
                last_poll = time.monotonic()
            progress.update(produced_bar, completed=produced, note=note)
            progress.update(read_bar, completed=read)
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {read} of {total} records read after {timeout_s}s")
            time.sleep(0.2)


def demo_both_active(records: int, work_dir: Path | None = None) -> Verification:
    """The stream lives in both clusters, both ACTIVE: east holds ``orders``,
    west holds ``orders`` and ``orders-eu``; every record is read exactly once."""
    wd = work_dir or temp_work_dir("multikafka-demo-")
    console.rule("[bold]multikafka demo: one stream, two clusters, exactly once")
    with console.status("starting Spark (local[2])"):
        spark = local_spark("multikafka-demo")
    stack = start_stack(wd, ("east", "west"))
    try:
        east, west = stack.clusters["east"].bootstrap, stack.clusters["west"].bootstrap
        create_topics(east, {TOPIC: PARTITIONS})
        create_topics(west, {TOPIC: PARTITIONS, "orders-eu": PARTITIONS})
        with AdminClient(stack.coordinator_address) as admin:
            admin.put_stream(
                stream_doc(
                    "orders", {"east": (east, [TOPIC]), "west": (west, [TOPIC, "orders-eu"])}
                )
            )
        console.print(r"stream [bold]orders[/bold] = east:\[orders] + west:\[orders, orders-eu]")
        per_feed = records // 3
        feeds = [
            Feed([east], TOPIC, PARTITIONS, "east-orders", chunk=1000, pause_s=0.1, limit=per_feed),
            Feed([west], TOPIC, PARTITIONS, "west-orders", chunk=1000, pause_s=0.1, limit=per_feed),
            Feed(
                [west], "orders-eu", PARTITIONS, "west-eu", chunk=1000, pause_s=0.1, limit=per_feed
            ),
        ]
        query = start_query(spark, stack, wd, max_per_trigger=max(records // 10, 1000))
        for feed in feeds:
            feed.start()
        follow(spark, query, feeds, per_feed * 3, wd / "sink", timeout_s=600)
        query.stop()
        for feed in feeds:
            feed.stop()
        with console.status("verifying the sink"):
            result = verify(spark, wd / "sink", {f.label: per_feed for f in feeds})
        print_verification(result, "rows read per cluster")
        return result
    finally:
        spark.stop()
        stack.stop()


def demo_failover(
    records: int, work_dir: Path | None = None, *, strategy: str = "timestamp"
) -> Verification:
    """Fail over east -> west mid-stream with ``strategy``, then migrate back
    west -> east."""
    wd = work_dir or temp_work_dir("multikafka-demo-")
    console.rule(
        "[bold]multikafka demo: live failover and migration, the query never restarts"
        + ("" if strategy == "timestamp" else f" ({strategy} mirror)")
    )
    with console.status("starting Spark (local[2])"):
        spark = local_spark("multikafka-demo")
    stack = start_stack(wd, ("east", "west"))
    admin = AdminClient(stack.coordinator_address)
    try:
        east_broker = stack.clusters["east"]
        east, west = east_broker.bootstrap, stack.clusters["west"].bootstrap
        stream = mirrored_stream(
            strategy,
            ("east", east),
            ("west", west),
            TOPIC,
            PARTITIONS,
            shifts=MM2_SHIFTS,
            marker_every=MM2_MARKER_EVERY,
        )
        admin.put_stream(stream.document("orders"))
        console.print(_mirror_line(stream))
        # ~30 s of production, so the story plays out while the query reads.
        feed = stream.feed("r", chunk=max(records // 300, 50), pause_s=0.1, limit=records)
        query = start_query(spark, stack, wd, max_per_trigger=max(records // 10, 1000))
        run_id = query.runId
        feed.start()
        phase = Phase(0, "reading east (west mirrors it)")

        def act(produced: int, read: int) -> str:
            if phase.n == 0 and produced >= records // 3 and read >= records // 5:
                # The mirror keeps receiving; east is gone.
                feed.route([west])
                east_broker.process.kill()
                margin = "" if strategy == "identity" else f", margin {MARGIN_MS // 1000}s"
                console.log(f"[red]east killed[/red]; failing over to west ({strategy}{margin})")
                admin.failover(
                    "orders",
                    "east",
                    "west",
                    strategy=strategy,
                    margin_ms=None if strategy == "identity" else MARGIN_MS,
                    reason="demo: east died",
                )
                phase.move(1, "east FAILED, reading west")
            elif phase.n == 1 and produced >= 2 * records // 3:
                console.log(
                    "east is back (empty); migrating back: activate east, producers to east, drain west"
                )
                restarted = TansuBroker(wd, "east", port=east_broker.port).start()
                stack.clusters["east"] = restarted
                create_topics(east, {TOPIC: PARTITIONS})
                phase.move(2, "east restarted; waiting until the query retired east's old splits")
            elif phase.n == 2:
                try:
                    admin.activate("orders", "east")
                except PreconditionError:
                    return phase.note  # the coordinator says: not yet
                feed.route([east])
                fence(west, stream.mirror_topic, PARTITIONS)  # tansu: west's end offsets exact
                admin.drain("orders", "west")
                phase.move(3, "reading east again, west DRAINING")
            elif phase.n == 3 and not feed.is_alive():
                phase.move(4, "all produced")
            return phase.note

        follow(spark, query, [feed], records, wd / "sink", timeout_s=900, on_tick=act)
        if query.runId != run_id or not query.isActive:
            raise RuntimeError("the query restarted or stopped during the demo")
        query.stop()
        feed.stop()
        with console.status("verifying the sink"):
            result = verify(spark, wd / "sink", {"r": records})
            result.note = _translations(admin)
        _print_history(admin)
        print_verification(result, "rows read per cluster (one query, never restarted)")
        return result
    finally:
        admin.close()
        spark.stop()
        stack.stop()


def _mirror_line(stream: MirroredStream) -> str:
    line = "stream [bold]orders[/bold]: east ACTIVE, west STANDBY "
    if stream.copy is None:
        same = "offsets" if stream.strategy == "identity" else "record times"
        return line + f"(west mirrors east: the same topic, the same {same})"
    shifts = ", ".join(f"+{n:,}" for n in stream.copy.shifts)
    return line + (
        f"(MirrorMaker 2's replica: topic {stream.mirror_topic}, offsets shifted {shifts} "
        f"and growing; offset syncs in {stream.copy.syncs_topic} on east, "
        f"offset.lag.max {stream.copy.offset_lag_max})"
    )


def _translations(admin: AdminClient) -> str:
    """One line on how the failover chose where west's splits start."""
    details = [e.detail for e in admin.history("orders") if e.kind == "translated"]
    matched = [d for d in details if "matched the last" in d]
    skipped = sum(int(m.group(1)) for d in matched if (m := _SKIPPED.search(d)))
    if not details:
        return ""
    return (
        f"the failover matched the last records read on {len(matched)} of {len(details)} "
        f"partitions: {skipped:,} records between the estimates and the starts were not "
        "read again"
    )


_SKIPPED = re.compile(r"(\d+) records not read again")


@dataclass
class Phase:
    n: int
    note: str

    def move(self, n: int, note: str) -> None:
        self.n, self.note = n, note


def _print_history(admin: AdminClient) -> None:
    table = Table(title="what the coordinator did (multikafka admin streams history orders)")
    for col in ("time", "kind", "cluster", "detail"):
        table.add_column(col)
    for e in admin.history("orders"):
        if e.kind in ("retired",):
            continue
        when = time.strftime("%H:%M:%S", time.localtime(e.time_ms / 1000))
        # a failover says in full what it translates with, and each
        # translation how it chose its start; the rest is cut short
        detail = e.detail if "failover" in e.kind or e.kind == "translated" else e.detail[:110]
        table.add_row(when, e.kind, e.cluster, detail)
    console.print(table)


def run_demo(
    records: int = 150_000,
    *,
    failover: bool = True,
    strategy: str = "timestamp",
    work_dir: Path | None = None,
) -> Verification:
    """Run the demo; ``failover`` adds the live failover and migration story,
    with ``strategy`` (one of :data:`STRATEGIES`)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if failover:
        return demo_failover(records, work_dir, strategy=strategy)
    return demo_both_active(records, work_dir)
