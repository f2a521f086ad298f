"""``multikafka demo`` / ``make demo``: the main job, end to end, on the
embedded default stack (etcd, two Kafka-compatible clusters "east" and
"west", the coordinator, a Spark Structured Streaming query into Parquet).

Default story (``--failover``): the stream is read from "east" while "west"
mirrors it (STANDBY). Mid-stream east dies; the stream fails over to west
with timestamp translation. Later east comes back empty and the stream
migrates back (east ACTIVE, west drained). The query never restarts. The
verification at the end: every record produced was read (lost = 0), and the
only duplicates are records inside the failover margin.

``--no-failover``: both clusters ACTIVE with their own topics; every record
is read exactly once (lost = 0, duplicated = 0).
"""

from __future__ import annotations

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
from multikafka.devstack.feed import FENCE_KEY, Feed, create_topics, fence
from multikafka.devstack.processes import EtcdServer, TansuBroker, temp_work_dir
from multikafka.devstack.spark import local_spark
from multikafka.devstack.stack import LocalStack, stream_doc
from multikafka.reader_agent.arrow import SPARK_DDL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

console = Console()

PARTITIONS = 3
TOPIC = "orders"
MARGIN_MS = 2000


@dataclass
class Verification:
    """What the sink holds, compared with what was produced."""

    produced: int = 0
    #: cluster -> rows read from it
    read: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    #: duplicates the failover margin allows (at-least-once); 0 without failover
    allowed_duplicates: int = 0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated <= self.allowed_duplicates


def _keys(spark: SparkSession, sink: Path) -> Any:
    from pyspark.sql import functions as F

    if not (sink / "_spark_metadata").exists():
        return None
    rows = spark.read.schema(SPARK_DDL).parquet(str(sink)).where(F.col("key") != F.lit(FENCE_KEY))
    return rows.select("cluster", "timestamp", F.col("key").cast("string").alias("k"))


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
    seen = {r["k"]: int(r["count"]) for r in keys.groupBy("k").count().collect()}
    result.lost = sum(
        1 for label, n in expected.items() for s in range(n) if f"{label}:{s}" not in seen
    )
    result.duplicated = sum(c - 1 for c in seen.values() if c > 1)
    return result


def print_verification(v: Verification, title: str) -> None:
    table = Table(title=title)
    table.add_column("cluster")
    table.add_column("rows read", justify="right")
    for cluster, n in sorted(v.read.items()):
        table.add_row(cluster, f"{n:,}")
    console.print(table)
    status = "[green]OK[/green]" if v.ok else "[red]FAILED[/red]"
    allowed = (
        f" (the failover margin allows {v.allowed_duplicates:,})" if v.allowed_duplicates else ""
    )
    console.print(
        f"{status}  produced {v.produced:,}  read {sum(v.read.values()):,}  "
        f"lost = {v.lost:,}  duplicated = {v.duplicated:,}{allowed}"
    )


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


def demo_failover(records: int, work_dir: Path | None = None) -> Verification:
    """Fail over east -> west mid-stream, then migrate back west -> east."""
    wd = work_dir or temp_work_dir("multikafka-demo-")
    console.rule("[bold]multikafka demo: live failover and migration, the query never restarts")
    with console.status("starting Spark (local[2])"):
        spark = local_spark("multikafka-demo")
    stack = start_stack(wd, ("east", "west"))
    admin = AdminClient(stack.coordinator_address)
    try:
        east_broker = stack.clusters["east"]
        east, west = east_broker.bootstrap, stack.clusters["west"].bootstrap
        for bs in (east, west):
            create_topics(bs, {TOPIC: PARTITIONS})
        admin.put_stream(
            stream_doc(
                "orders",
                {"east": (east, [TOPIC]), "west": (west, [TOPIC])},
                states={"west": "STANDBY"},
            )
        )
        console.print("stream [bold]orders[/bold]: east ACTIVE, west STANDBY (west mirrors east)")
        # ~30 s of production, so the story plays out while the query reads.
        feed = Feed(
            [east, west],
            TOPIC,
            PARTITIONS,
            "r",
            chunk=max(records // 300, 50),
            pause_s=0.1,
            limit=records,
        )
        query = start_query(spark, stack, wd, max_per_trigger=max(records // 10, 1000))
        run_id = query.runId
        feed.start()
        phase = Phase(0, "reading east (west mirrors it)")

        def act(produced: int, read: int) -> str:
            if phase.n == 0 and produced >= records // 3 and read >= records // 5:
                # The mirror keeps receiving; east is gone.
                phase.killed_at_seq = feed.route([west])
                east_broker.process.kill()
                console.log(
                    "[red]east killed[/red]; failing over to west (timestamp strategy, margin 2s)"
                )
                admin.failover(
                    "orders",
                    "east",
                    "west",
                    strategy="timestamp",
                    margin_ms=MARGIN_MS,
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
                fence(west, TOPIC, PARTITIONS)  # tansu: make west's end offsets exact
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
            result.allowed_duplicates = _margin_window(
                spark, wd / "sink", feed, phase.killed_at_seq
            )
        _print_history(admin)
        print_verification(result, "rows read per cluster (one query, never restarted)")
        return result
    finally:
        admin.close()
        spark.stop()
        stack.stop()


@dataclass
class Phase:
    n: int
    note: str
    #: records produced when east died (those below were on east)
    killed_at_seq: int = 0

    def move(self, n: int, note: str) -> None:
        self.n, self.note = n, note


def _margin_window(spark: SparkSession, sink: Path, feed: Feed, killed_at_seq: int) -> int:
    """How many records the failover may read twice (see Feed.margin_window)."""
    east = _keys(spark, sink).where("cluster = 'east'").select("k").collect()
    return len(
        feed.margin_window((int(r["k"].split(":")[1]) for r in east), killed_at_seq, MARGIN_MS)
    )


def _print_history(admin: AdminClient) -> None:
    table = Table(title="what the coordinator did (multikafka admin streams history orders)")
    for col in ("time", "kind", "cluster", "detail"):
        table.add_column(col)
    for e in admin.history("orders"):
        if e.kind in ("retired",):
            continue
        when = time.strftime("%H:%M:%S", time.localtime(e.time_ms / 1000))
        table.add_row(when, e.kind, e.cluster, e.detail[:110])
    console.print(table)


def run_demo(
    records: int = 150_000, *, failover: bool = True, work_dir: Path | None = None
) -> Verification:
    """Run the demo; ``failover`` adds the live failover and migration story."""
    if failover:
        return demo_failover(records, work_dir)
    return demo_both_active(records, work_dir)
