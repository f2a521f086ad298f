"""``multikafka demo`` / ``make demo``: the main job, end to end, on the
embedded default stack.

It starts etcd, two Kafka-compatible clusters ("east", "west") and the
coordinator, produces sequence-numbered records to a stream that lives in
both, runs a Spark Structured Streaming query with ``format("multikafka")``
into Parquet, shows progress while it runs, and ends with a verification:
records produced vs read per cluster, lost and duplicated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from multikafka.admin_client import AdminClient
from multikafka.devstack.data import FENCE_KEY, SequenceProducer, create_topics, fence
from multikafka.devstack.processes import EtcdServer, temp_work_dir
from multikafka.devstack.spark import local_spark
from multikafka.devstack.stack import LocalStack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

console = Console()

PARTITIONS = 3


@dataclass
class Verification:
    """What the sink holds, compared with what was produced."""

    #: cluster -> records produced there (by key label)
    produced: dict[str, int] = field(default_factory=dict)
    #: cluster -> rows read from there
    read: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    #: duplicates the failover margin allows (at-least-once), when there was one
    allowed_duplicates: int = 0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated <= self.allowed_duplicates


def verify(spark: SparkSession, sink: Path, expected: dict[str, int]) -> Verification:
    """Compare the Parquet sink with ``expected`` (label -> count of seqs 0..n-1)."""
    from pyspark.sql import functions as F

    rows = spark.read.parquet(str(sink)).where(F.col("key") != F.lit(FENCE_KEY))
    keys = rows.select(F.col("cluster"), F.col("key").cast("string").alias("k"))
    result = Verification()
    for r in keys.groupBy("cluster").count().collect():
        result.read[r["cluster"]] = int(r["count"])
    per_key = keys.groupBy("k").count()
    seen = {r["k"]: int(r["count"]) for r in per_key.collect()}
    for label, n in expected.items():
        got = sum(1 for s in range(n) if f"{label}:{s}" in seen)
        result.lost += n - got
    result.duplicated = sum(c - 1 for c in seen.values() if c > 1)
    return result


class Feeder(threading.Thread):
    """Produces ``count`` records per (cluster, topic) in chunks, then fences."""

    def __init__(
        self,
        targets: list[tuple[str, str, str]],
        count: int,
        *,
        chunks: int = 20,
        pause_s: float = 0.25,
    ):
        super().__init__(name="demo-producer", daemon=True)
        self.targets = targets  # (label, bootstrap, topic)
        self.count = count
        self.chunks = chunks
        self.pause_s = pause_s
        self.produced = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producers = {bs: SequenceProducer(bs) for _, bs, _ in self.targets}
            step = max(self.count // self.chunks, 1)
            for lo in range(0, self.count, step):
                hi = min(lo + step, self.count)
                for label, bs, topic in self.targets:
                    producers[bs].produce(topic, PARTITIONS, label, range(lo, hi))
                for p in producers.values():
                    p.flush()
                self.produced += (hi - lo) * len(self.targets)
                time.sleep(self.pause_s)
            for _, bs, topic in self.targets:
                fence(bs, topic, PARTITIONS)
        except BaseException as exc:  # surfaced by the demo loop
            self.error = exc


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
    )


def rows_read(query: StreamingQuery) -> int:
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def run_until(
    query: StreamingQuery,
    feeder: Feeder,
    total: int,
    *,
    fences: int,
    timeout_s: float,
    on_tick: Callable[[int], str] | None = None,
) -> None:
    """Show progress until the query read ``total`` records (+ fences)."""
    deadline = time.monotonic() + timeout_s
    with _progress() as progress:
        produced = progress.add_task("produced", total=total, note="")
        read = progress.add_task("read by Spark", total=total, note="")
        while True:
            if feeder.error is not None:
                raise RuntimeError("producer failed") from feeder.error
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            n = rows_read(query)
            note = on_tick(n) if on_tick else ""
            progress.update(produced, completed=feeder.produced)
            progress.update(read, completed=min(n, total), note=note)
            if n >= total + fences and not feeder.is_alive():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {n} of {total} records read after {timeout_s}s")
            time.sleep(0.25)


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


def print_verification(v: Verification, title: str) -> None:
    table = Table(title=title)
    for col in ("cluster", "read"):
        table.add_column(col, justify="right" if col != "cluster" else "left")
    for cluster, n in sorted(v.read.items()):
        table.add_row(cluster, f"{n:,}")
    console.print(table)
    produced = sum(v.produced.values())
    status = "[green]OK[/green]" if v.ok else "[red]FAILED[/red]"
    dup_note = (
        f" (allowed by the failover margin: {v.allowed_duplicates:,})"
        if v.allowed_duplicates
        else ""
    )
    console.print(
        f"{status}  produced {produced:,}  read {sum(v.read.values()):,}  "
        f"lost = {v.lost:,}  duplicated = {v.duplicated:,}{dup_note}"
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
        create_topics(east, {"orders": PARTITIONS})
        create_topics(west, {"orders": PARTITIONS, "orders-eu": PARTITIONS})
        stream = {
            "name": "orders",
            "clusters": {
                "east": {"bootstrap_servers": east, "topics": ["orders"]},
                "west": {"bootstrap_servers": west, "topics": ["orders", "orders-eu"]},
            },
        }
        with AdminClient(stack.coordinator_address) as admin:
            admin.put_stream(stream)
        console.print("stream [bold]orders[/bold] = east:[orders] + west:[orders, orders-eu]")
        targets = [
            ("east-orders", east, "orders"),
            ("west-orders", west, "orders"),
            ("west-eu", west, "orders-eu"),
        ]
        per_target = records // len(targets)
        feeder = Feeder(targets, per_target)
        query = start_query(spark, stack, wd, max_per_trigger=max(records // 10, 1000))
        feeder.start()
        total = per_target * len(targets)
        run_until(query, feeder, total, fences=len(targets) * PARTITIONS, timeout_s=600)
        query.stop()
        with console.status("verifying the sink"):
            result = verify(spark, wd / "sink", {label: per_target for label, _, _ in targets})
        result.produced = {label: per_target for label, _, _ in targets}
        print_verification(result, "records read per cluster")
        return result
    finally:
        spark.stop()
        stack.stop()


def run_demo(
    records: int = 150_000, *, failover: bool = True, work_dir: Path | None = None
) -> Verification:
    """Run the demo; ``failover`` adds the live failover and migration story."""
    return demo_both_active(records, work_dir)
