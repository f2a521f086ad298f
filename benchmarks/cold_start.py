"""Cold start: how long the first record takes through a query that just
started, and a ``Trigger.AvailableNow`` run, against a no-I/O Python source
on the same Spark (the floor: what any Python source pays).

    python -m benchmarks.cold_start [--repeat 3] [--idle 8] [--records 10000] [--out docs]

Each source runs in a process of its own with a fresh Spark session
(``local[2]``), one source after the other in each round:

* ``python`` (the floor): a minimal Python streaming source whose one record
  "arrives" ``--idle`` seconds after the query started (``latestOffset``
  answers it from then on), made up in memory by two tasks; like
  multikafka it plans no task while it has no record (a task before the
  first record would start its Python worker early, and it would be warm);
* ``multikafka``: a query with ``startingOffsets=latest`` over 2 clusters x 2
  partitions (tansu, a coordinator process of its own); ``--idle`` seconds
  after it started, one record is produced.

**Cold first record**: from the record's arrival (produced, or made
available) to ``foreachBatch`` having it, with the durations Spark reports
for that micro-batch. The query idles first, so everything the query's start
does is over: what is left is what the first micro-batch with data costs
(Python workers, imports, the reader's set-up, the first fetch).

Spark's Python workers write where their first read went
(``multikafka.reader_agent._startup``: the worker's start, our imports done,
the coordinator link, each sub-reader, the first records), reported as
seconds after the record's arrival.

**AvailableNow**: in the same (now warm) session, a ``Trigger.AvailableNow``
query over ``--records`` records that are there already (multikafka: produced
before it starts, from ``startingTimestamp`` before them), from its start to
its termination (multikafka: from the exact end offsets before them;
each cluster fenced after, so its end is exact on tansu).

Reported: medians with [min - max] over the rounds, multikafka minus the
floor (cold; the goal is <= 0.3 s) and multikafka / floor (AvailableNow).
Writes ``benchmarks/out/cold_start.json`` and ``<out>/img/cold_start.png``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from benchmarks._common import (
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    quiet_logs,
    summary,
)
from benchmarks.latency import CLUSTERS, PARTITIONS, TOPIC, latency_stack
from multikafka.core.retry import poll
from multikafka.devstack.feed import fence
from multikafka.reader_agent import _startup as startup

SOURCES = ("python", "multikafka")
#: The floor's tasks: what multikafka plans here (one per core).
TASKS = 2
GOAL_COLD_S = 0.3


def register_floor_source(spark: Any) -> None:
    """The no-I/O source: records ``0 .. available - 1`` from the start and
    one more at ``arrive_at`` (epoch seconds), made up by ``TASKS`` tasks."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    def trace_worker() -> None:
        """The floor's side of the startup trace (``reader_agent._startup``'s
        format; defined here, so that Spark pickles it with the reader and
        the worker imports nothing of ours): its worker's start and first read."""
        import json
        import os
        import time

        path = os.environ.get("MULTIKAFKA_STARTUP_TRACE")
        if not path or os.environ.get("_COLD_FLOOR_TRACED"):
            return
        os.environ["_COLD_FLOOR_TRACED"] = "1"
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {"pid": os.getpid(), "started": started, "stamps": {"task": time.time()}}
                )
            )
            f.write("\n")

    class Reader(DataSourceStreamReader):
        def __init__(self, available: int, arrive_at: float) -> None:
            self.available = available
            self.arrive_at = arrive_at

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:
            more = 1 if self.arrive_at and time.time() >= self.arrive_at else 0
            return {"n": self.available + more}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            # No records, no tasks (as multikafka plans): a task would start
            # the Python worker before the first record, and it would no
            # longer be cold.
            n = end["n"] - start["n"]
            return [InputPartition((start["n"] + i, end["n"])) for i in range(min(TASKS, n))]

        def read(self, partition: Any) -> Any:
            trace_worker()
            first, end = partition.value
            for n in range(first, end, TASKS):
                yield (n, b"x" * 64)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "cold_floor"

        def schema(self) -> str:
            return "n long, value binary"

        def streamReader(self, schema: Any) -> Reader:
            return Reader(int(self.options["available"]), float(self.options["arrive_at"]))

    spark.dataSource.register(FloorSource)


def _first_batch(query: Any, timeout_s: float = 10.0) -> dict[str, int]:
    """Spark's durations of the query's first micro-batch that had rows
    (reported once the micro-batch ended, after ``foreachBatch``)."""

    def first() -> dict[str, int] | None:
        return next((dict(p.durationMs) for p in query.recentProgress if p.numInputRows), None)

    try:
        return poll(first, timeout_s=timeout_s, what="a micro-batch with rows")
    except TimeoutError:
        return {}


def _ends(bootstraps: dict[str, str]) -> dict[str, dict[str, list[int]]]:
    """Each cluster's end offsets of the topic, exact (fenced first: tansu's
    end of a many-record produce batch is its first offset + 1)."""
    from confluent_kafka import Consumer, TopicPartition

    out = {}
    for cluster, bootstrap in bootstraps.items():
        fence(bootstrap, TOPIC, PARTITIONS)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold-start"})
        try:
            out[cluster] = {
                TOPIC: [
                    consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                    for p in range(PARTITIONS)
                ]
            }
        finally:
            consumer.close()
    return out


def _workers(trace: Path, arrive_at: float) -> list[dict[str, float]]:
    """Each Python worker's first read (``reader_agent._startup``): seconds
    from the record's arrival to its start and to each stamp."""
    if not trace.exists():
        return []
    out = []
    for line in trace.read_text().splitlines():
        w = json.loads(line)
        stamps = {"worker started": w["started"] or arrive_at, **w["stamps"]}
        out.append(
            {k: round(t - arrive_at, 3) for k, t in sorted(stamps.items(), key=lambda m: m[1])}
        )
    return out


def _in_child(source: str, address: str, bootstraps: dict[str, str], idle_s: float, records: int) -> dict[str, Any]:  # fmt: skip
    """One source in a fresh Spark session (this process is a fresh one)."""
    quiet_logs()
    from confluent_kafka import Producer

    from multikafka.devstack.spark import local_spark

    work = tempfile.mkdtemp(prefix=f"cold-{source}-")
    # Spark's Python workers inherit it: each writes where its first read went.
    trace = Path(work) / "startup.jsonl"
    os.environ[startup.ENV] = str(trace)
    spark = local_spark(f"cold-{source}")
    try:
        seen: dict[str, float] = {}

        def on_batch(df: Any, batch_id: int) -> None:
            if df.limit(1).collect() and "first" not in seen:
                seen["first"] = time.time()

        producers = [
            Producer({"bootstrap.servers": bootstraps[c], "linger.ms": 0}) for c in CLUSTERS
        ]
        if source == "python":
            register_floor_source(spark)
            arrive_at = time.time() + idle_s
            reader = (
                spark.readStream.format("cold_floor")
                .option("available", 0)
                .option("arrive_at", arrive_at)
            )
        else:
            reader = (
                spark.readStream.format("multikafka")
                .option("coordinator", address)
                .option("stream", "latency")
                .option("startingOffsets", "latest")
                .option("queryId", f"cold-{os.getpid()}")
            )
        query = (
            reader.load()
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", f"{work}/cold")
            .start()
        )
        if source == "python":
            time.sleep(max(0.0, arrive_at - time.time()))  # the idle time itself
        else:
            time.sleep(idle_s)  # the idle time itself
            arrive_at = time.time()
            producers[0].produce(TOPIC, b"cold", key=b"cold", partition=0)
            producers[0].flush(10)
        poll(lambda: "first" in seen, timeout_s=120, what="the first record", interval_s=0.005)
        first_s = seen["first"] - arrive_at
        phases = _first_batch(query)
        query.stop()
        workers = _workers(trace, arrive_at)

        # AvailableNow over records that are there already, in this warm session.
        if source == "python":
            an_reader = (
                spark.readStream.format("cold_floor")
                .option("available", records)
                .option("arrive_at", 0)
            )
        else:
            before = _ends(bootstraps)
            for i in range(records):  # over both clusters' partitions
                producer = producers[(i // PARTITIONS) % len(producers)]
                producer.produce(TOPIC, b"x" * 64, key=b"an:%d" % i, partition=i % PARTITIONS)
                if i % 1000 == 0:
                    producer.poll(0)
            for producer in producers:
                producer.flush(30)
            for bootstrap in bootstraps.values():
                fence(bootstrap, TOPIC, PARTITIONS)  # exact ends: every record is read
            an_reader = (
                spark.readStream.format("multikafka")
                .option("coordinator", address)
                .option("stream", "latency")
                .option("startingOffsets", json.dumps(before))
                .option("queryId", f"cold-an-{os.getpid()}")
            )
        counted = [0]

        def count(df: Any, batch_id: int) -> None:
            counted[0] += df.count()

        started = time.time()
        an = (
            an_reader.load()
            .writeStream.foreachBatch(count)
            .option("checkpointLocation", f"{work}/available-now")
            .trigger(availableNow=True)
            .start()
        )
        an.awaitTermination(300)
        available_now_s = time.time() - started
        return {
            "first_record_s": first_s,
            "first_batch_ms": phases,
            "workers": workers,
            "available_now_s": available_now_s,
            "available_now_records": counted[0],
        }
    finally:
        spark.stop()


def one_round(address: str, bootstraps: dict[str, str], idle_s: float, records: int) -> dict[str, Any]:  # fmt: skip
    ctx = multiprocessing.get_context("spawn")
    out = {}
    for source in SOURCES:
        with ctx.Pool(1) as pool:
            out[source] = pool.apply(_in_child, (source, address, bootstraps, idle_s, records))
    return out


def report(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="cold start: first record, and a Trigger.AvailableNow run")
    for column in ("source", "cold first record", "first batch addBatch", "AvailableNow"):
        table.add_column(column)
    for source in SOURCES:
        s = result["summary"][source]
        table.add_row(
            source,
            median_range(s["first_record_s"], "{:.2f}") + " s",
            f"{s['add_batch_ms']['median']:.0f} ms",
            median_range(s["available_now_s"], "{:.2f}") + " s",
        )
    console.print(table)
    for i, r in enumerate(result["rounds"]):
        for source in SOURCES:
            for w in r[source]["workers"]:
                steps = ", ".join(f"{k} {v:+.2f}" for k, v in w.items())
                console.print(f"  round {i + 1} {source} worker (s after the record): {steps}")
    v = result["verdict"]
    console.print(
        f"cold: multikafka - floor = {v['cold_added_s']:.2f} s (goal <= {GOAL_COLD_S} s: "
        f"{'met' if v['cold_goal_met'] else 'not met'}); AvailableNow: "
        f"{v['available_now_ratio']:.2f}x the floor's time"
    )


def plot(result: dict[str, Any], path: Any) -> None:
    with figure(path, 1, 2, figsize=(10, 4)) as (_fig, (cold, an)):
        colors = ["tab:gray", "tab:blue"]
        bars_with_range(
            cold,
            SOURCES,
            [result["summary"][s]["first_record_s"] for s in SOURCES],
            label="first record, arrival -> foreachBatch (s)",
            colors=colors,
        )
        cold.set_title("cold first record (fresh session)")
        bars_with_range(
            an,
            SOURCES,
            [result["summary"][s]["available_now_s"] for s in SOURCES],
            label="start -> termination (s)",
            colors=colors,
        )
        an.set_title(f"Trigger.AvailableNow, {result['records']:,} records (warm session)")


def main() -> None:
    parser = Arguments(__doc__, smoke={"repeat": 1, "records": 1_000}, repeat=3)
    parser.add_argument("--idle", type=float, default=8.0)
    parser.add_argument("--records", type=int, default=10_000)
    args = parser.parse_args()
    quiet_logs()
    result: dict[str, Any] = {
        "machine": machine(),
        "idle_s": args.idle,
        "records": args.records,
        "rounds": [],
    }
    with latency_stack() as (stack, address), progress_bar() as progress:
        bootstraps = {n: stack.clusters[n].bootstrap for n in CLUSTERS}
        task = progress.add_task("rounds", total=args.repeat, note="")
        for _ in range(args.repeat):
            result["rounds"].append(one_round(address, bootstraps, args.idle, args.records))
            progress.advance(task)
    result["summary"] = {
        s: {
            "first_record_s": summary([r[s]["first_record_s"] for r in result["rounds"]]),
            "add_batch_ms": summary(
                [r[s]["first_batch_ms"].get("addBatch", 0) for r in result["rounds"]]
            ),
            "available_now_s": summary([r[s]["available_now_s"] for r in result["rounds"]]),
        }
        for s in SOURCES
    }
    mk, floor = result["summary"]["multikafka"], result["summary"]["python"]
    added = mk["first_record_s"]["median"] - floor["first_record_s"]["median"]
    result["verdict"] = {
        "cold_added_s": added,
        "cold_goal_met": added <= GOAL_COLD_S,
        "available_now_ratio": mk["available_now_s"]["median"] / floor["available_now_s"]["median"],
    }
    finish("cold_start", result, args, plot)
    report(result)


if __name__ == "__main__":
    main()
