"""Small micro-batches: multikafka's steady rate against Spark's floor, per batch size.

    python -m benchmarks.small_batches [--sizes 10000 100000 1000000]
        [--batches 10] [--repeat 2] [--out docs]

Starts Spark ``local[2]`` with nothing registered (multikafka is the source
PySpark discovers, as users run it) and, for each batch size, a local stack
of its own (etcd, two tansu clusters x 4 partitions, a coordinator in a
thread) holding ``--batches`` x the size records (100-byte values): tansu's
fetch slows as a partition grows, which Kafka's offset index does not (a
fresh read of 1,250 records from each of 4 partitions: 40-70 ms at 12,500
records a partition, 140-250 ms at 1,250,000), so the small sizes do not
read the largest size's topics. On each stack: ``fresh read``, a plain
consumer new to the brokers reading one micro-batch's ranges of a cluster
(what a task whose split's leftovers are in another worker waits); then,
after an untimed warm-up on the first (Spark starts its Python workers),
``--repeat`` times:

* ``multikafka``: a query with the default trigger and
  ``maxOffsetsPerTrigger`` = the size, stopped after ``--batches``
  micro-batches;
* ``floor_2`` / ``floor_8``: Spark's floor, the no-I/O Python source of
  :mod:`benchmarks.spark_versions` handing out the same batch sizes in 2
  tasks (the cores) and in 8 (one per split);

and, on the largest size's stack, once per round the plain consumer (``raw``)
and its counting, GC-off variant (``raw_nogc_count``) over the whole stream:
:mod:`benchmarks.read_rate`'s baselines for the large-batch check.

The steady rate is that of micro-batches 2 to the last (records over Spark's
``triggerExecution`` times); multikafka's is taken as a ratio to the floor's
best (the better of its 2- and 8-task runs) of the same round (the
goal), and to the read floor of that round: what a Kafka source that paid
nothing beyond Spark's per-batch cost and the plain read would reach, the
no-I/O floor's time per record plus ``raw_nogc_count``'s, i.e.
``1 / (1 / floor_best + 1 / raw_nogc_count)``. Where 0.8x the no-I/O floor
is above the read floor, no Kafka source can meet the goal there, and the
report says so. Beside every
rate: the CPU seconds of Spark's Python workers per million records, and the
tasks of each micro-batch (Spark's status tracker). The large-batch check:
the in-batch rate of the largest size (records over ``triggerExecution``)
against the plain consumer, and its worker CPU against ``raw_nogc_count``.

Results: ``benchmarks/out/small_batches.json`` and ``<out>/img/small_batches.png``.
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

# First of what loads grpc or pyspark: it sets their environment.
from benchmarks import read_rate as rr
from benchmarks._common import (
    Arguments,
    console,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    quiet_logs,
    summary,
)
from benchmarks.spark_versions import register_floor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SIZES = (10_000, 100_000, 1_000_000)
#: The floor's task counts: the cores, and one per split.
FLOOR_TASKS = (2, 8)
SOURCES = ("multikafka", *(f"floor_{n}" for n in FLOOR_TASKS))
#: Goals: steady rate / the floor's best; and for large
#: batches, read_rate's (in-batch rate / plain consumer, worker CPU / baseline).
FLOOR_GOAL = 0.8


def read_floor(floor_best: float, raw_nogc_count: float) -> float:
    """Records/s of a source that pays the no-I/O floor's time per record
    and the plain counting consumer's, one after the other."""
    if floor_best <= 0 or raw_nogc_count <= 0:
        return 0.0
    return 1 / (1 / floor_best + 1 / raw_nogc_count)


@contextmanager
def discovering_spark() -> Iterator[SparkSession]:
    """Spark ``local[2]`` with multikafka not registered (PySpark discovers it)."""
    from multikafka.devstack.spark import local_spark

    with console.status(f"starting Spark (local[{rr.CORES}])"):
        spark = local_spark("multikafka-bench-small-batches", cores=rr.CORES, register=False)
    try:
        yield spark
    finally:
        spark.stop()


def tasks_per_batch(spark: SparkSession, run_id: str | None) -> list[int]:
    """The tasks of each job of a query's run (one job per micro-batch with
    data), from Spark's status tracker (the query's job group is its run id)."""
    if run_id is None:
        return []
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(run_id)):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in info.stageIds] if info else []
        out.append(sum(s.numTasks for s in stages if s is not None))
    return out


def one_run(
    spark: SparkSession, setup: rr.Setup, floor: str, source: str, size: int, batches: int
) -> dict[str, Any]:
    """``batches`` micro-batches of ``size`` records from ``source``."""
    total = size * batches
    if source == "multikafka":
        name, options = "multikafka", {"maxOffsetsPerTrigger": str(size)}
    else:
        tasks = source.removeprefix("floor_")
        name, options = floor, {"total": str(total), "step": str(size), "tasks": tasks}
    cpu0 = rr.cpu_snapshot()
    run = rr.read_spark(
        spark,
        setup,
        lambda n: None,
        method=source,
        options=options,
        source=name,
        available_now=False,
        until=total,
    )
    cpu = rr.cpu_by_role(cpu0).get(rr.WORKERS, 0.0)
    steady = run.extra["batch_durations_ms"][1:batches]
    rows = run.extra["batch_rows"][:batches]
    if sum(rows) < total:
        raise RuntimeError(f"{source} read {sum(rows):,} of {total:,} records")
    return {
        "source": source,
        "size": size,
        "records": run.records,
        "steady_rate": run.extra.get("steady_rate"),
        "in_batch_rate": run.extra.get("trigger_rate"),
        "first_batch_ms": run.extra.get("first_batch_ms"),
        "batch_ms": run.extra["batch_ms"],
        # Spark's split of the steady micro-batches' time, median per phase
        "phases_ms": {
            phase: statistics.median(d.get(phase, 0) for d in steady)
            for phase in (steady[0] if steady else {})
        },
        "worker_cpu_per_million": cpu / run.records * 1e6,
        "tasks": tasks_per_batch(spark, run.extra.get("run_id")),
    }


def fresh_read_ms(setup: rr.Setup, size: int, repeat: int = 3) -> float:
    """Median wall time of a plain consumer (the readers' settings) new to
    the brokers reading one micro-batch's ranges of one cluster (``size``
    over every partition of both clusters), from the middle of the topic:
    what a task that lands on a worker without the split's leftovers waits
    for its first cluster, on these brokers."""
    from confluent_kafka import TopicPartition

    cluster, bootstrap = next(iter(setup.bootstraps.items()))
    per = max(1, size // (len(rr.CLUSTERS) * rr.PARTITIONS))
    start = max(0, setup.per_cluster[cluster] // rr.PARTITIONS // 2 - per)
    walls = []
    for i in range(repeat):
        consumer = rr.plain_consumer(bootstrap, f"bench-fresh-{i}")
        try:
            consumer.list_topics(rr.TOPIC, timeout=10)  # connected, as a worker's reader is
            left = dict.fromkeys(range(rr.PARTITIONS), per)
            t0 = time.perf_counter()
            consumer.assign([TopicPartition(rr.TOPIC, p, start) for p in left])
            while any(n > 0 for n in left.values()) and time.perf_counter() - t0 < 30:
                # As the range consumer takes: the first record, then what is fetched.
                for m in consumer.consume(1, 1.0) + consumer.consume(rr.CONSUME_BATCH, 0):
                    partition = m.partition()
                    if m.error() is None and partition is not None:
                        left[partition] -= 1
            walls.append((time.perf_counter() - t0) * 1000)
        finally:
            consumer.close()
    return statistics.median(walls)


def measure(
    spark: SparkSession, sizes: list[int], batches: int, repeat: int
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Each size on a stack of its own whose topics hold ``batches`` x the
    size: tansu's fetch slows as a partition grows (a Kafka broker's offset
    index does not), so a small size read from the largest size's topics
    would measure tansu's storage. The plain consumer runs on the largest."""
    floor = register_floor(spark)
    runs: list[dict[str, Any]] = []
    records: dict[int, int] = {}
    for n, size in enumerate(sizes):
        with rr.started_stack(size * batches, 100) as setup:
            records[size] = setup.expected
            if n == 0:
                with console.status("warm-up: Spark's Python workers start"):
                    for source in SOURCES:
                        one_run(spark, setup, floor, source, size, 3)
            baselines = ("raw", "raw_nogc_count") if size == max(sizes) else ()
            runs += measure_size(spark, setup, floor, size, batches, repeat, baselines)
    return runs, records


def measure_size(
    spark: SparkSession,
    setup: rr.Setup,
    floor: str,
    size: int,
    batches: int,
    repeat: int,
    baselines: tuple[str, ...],
) -> list[dict[str, Any]]:
    """On one stack: the fresh read, then ``repeat`` rounds of every source
    and of ``baselines`` (the plain consumers)."""
    runs: list[dict[str, Any]] = []
    with progress_bar() as progress:
        steps = repeat * (len(SOURCES) + len(baselines)) + 1
        task = progress.add_task(f"{size:,} per micro-batch", total=steps, note="")

        def step(note: str, fn: Callable[..., Any], *args: Any) -> Any:
            progress.update(task, note=note)
            out = fn(*args)
            progress.advance(task)
            return out

        fresh = step("a fresh read", fresh_read_ms, setup, size)
        runs.append({"round": 0, "source": "fresh_read", "size": size, "ms": fresh})
        console.log(f"{size:>9,}/batch: a plain consumer's fresh read {fresh:.0f} ms")
        for rnd in range(repeat):
            for source in SOURCES:
                note = f"round {rnd + 1}: {source}"
                run = step(note, one_run, spark, setup, floor, source, size, batches)
                runs.append({"round": rnd, **run})
                console.log(
                    f"round {rnd + 1} {size:>9,}/batch {source:<10} steady "
                    f"{run['steady_rate'] or 0:>9,.0f} rec/s, "
                    f"{run['worker_cpu_per_million']:.2f} worker CPU-s/1M, "
                    f"tasks {run['tasks']}"
                )
            for method in baselines:
                raw = step(f"round {rnd + 1}: {method}", raw_run, setup, method)
                runs.append({"round": rnd, **raw})
    return runs


def raw_run(setup: rr.Setup, method: str) -> dict[str, Any]:
    """One plain-consumer baseline over the whole stream."""
    raw = rr.read_raw(setup, lambda n: None, count_only=method == "raw_nogc_count")
    return {
        "source": method,
        "rate": raw.rate,
        "cpu_per_million": raw.extra["reader_cpu_s"] / raw.records * 1e6,
    }


def summarize(runs: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Per size: rates, worker CPU, tasks and the ratio to the floor's best,
    each ratio per round; the large-batch check on the largest size."""
    rounds = sorted({r["round"] for r in runs})
    by = {(r["source"], r.get("size"), r["round"]): r for r in runs}
    out: dict[str, Any] = {"sizes": {}}
    for size in sizes:
        row: dict[str, Any] = {}
        for source in SOURCES:
            mine = [by[(source, size, i)] for i in rounds]
            row[source] = {
                "steady_rate": summary([r["steady_rate"] or 0.0 for r in mine]),
                "worker_cpu_per_million": summary([r["worker_cpu_per_million"] for r in mine]),
                "tasks": [r["tasks"] for r in mine],
            }
        best = [
            max(by[(f"floor_{n}", size, i)]["steady_rate"] or 0.0 for n in FLOOR_TASKS)
            for i in rounds
        ]
        mk = [by[("multikafka", size, i)]["steady_rate"] or 0.0 for i in rounds]
        reads = [
            read_floor(b, by[("raw_nogc_count", None, i)]["rate"])
            for b, i in zip(best, rounds, strict=True)
        ]
        row["fresh_read_ms"] = by[("fresh_read", size, 0)]["ms"]
        row["floor_best"] = summary(best)
        row["multikafka/floor_best"] = summary([m / b for m, b in zip(mk, best, strict=True) if b])
        row["read_floor"] = summary(reads)
        row["multikafka/read_floor"] = summary([m / r for m, r in zip(mk, reads, strict=True) if r])
        # The goal as a rate, and what it is of the read floor (> 1: no
        # Kafka source reaches it at this size).
        row["goal/read_floor"] = summary(
            [FLOOR_GOAL * b / r for b, r in zip(best, reads, strict=True) if r]
        )
        out["sizes"][str(size)] = row
    large = max(sizes)
    raw = [by[("raw", None, i)]["rate"] for i in rounds]
    base = [by[("raw_nogc_count", None, i)]["cpu_per_million"] for i in rounds]
    mk_large = [by[("multikafka", large, i)] for i in rounds]
    out["large_batch"] = {
        "size": large,
        "raw_rate": summary(raw),
        "raw_nogc_count_cpu_per_million": summary(base),
        "in_batch_rate": summary([r["in_batch_rate"] or 0.0 for r in mk_large]),
        "in_batch/raw": summary(
            [(r["in_batch_rate"] or 0.0) / x for r, x in zip(mk_large, raw, strict=True)]
        ),
        "worker_cpu/raw_nogc_count": summary(
            [r["worker_cpu_per_million"] / b for r, b in zip(mk_large, base, strict=True) if b]
        ),
    }
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    summ = result["summary"]["sizes"]
    sizes = [int(s) for s in summ]
    with figure(path, 1, 2, figsize=(13, 4.6)) as (fig, (left, right)):
        styles = {"multikafka": "o-", "floor_2": "s--", "floor_8": "^:"}
        labels = {
            "multikafka": "multikafka (discovered source)",
            "floor_2": "no-I/O source, 2 tasks",
            "floor_8": "no-I/O source, 8 tasks",
        }
        for source in SOURCES:
            for ax, key, scale in (
                (left, "steady_rate", 1e-3),
                (right, "worker_cpu_per_million", 1),
            ):
                s = [summ[str(n)][source][key] for n in sizes]
                med = [x["median"] * scale for x in s]
                err = [
                    [m - x["min"] * scale for m, x in zip(med, s, strict=True)],
                    [x["max"] * scale - m for m, x in zip(med, s, strict=True)],
                ]
                ax.errorbar(
                    sizes, med, yerr=err, fmt=styles[source], capsize=4, label=labels[source]
                )
        reads = [summ[str(n)]["read_floor"] for n in sizes]
        med = [x["median"] / 1000 for x in reads]
        left.errorbar(
            sizes,
            med,
            yerr=[
                [m - x["min"] / 1000 for m, x in zip(med, reads, strict=True)],
                [x["max"] / 1000 - m for m, x in zip(med, reads, strict=True)],
            ],
            fmt="D-.",
            capsize=4,
            label="read floor: no-I/O floor's best + plain consumer's time",
        )
        for n in sizes:
            row = summ[str(n)]
            rate = row["multikafka"]["steady_rate"]["median"] / 1000
            left.annotate(
                f"{row['multikafka/floor_best']['median']:.2f}x floor\n"
                f"{row['multikafka/read_floor']['median']:.2f}x read floor",
                (n, rate),
                xytext=(6, -22),
                textcoords="offset points",
                fontsize=8,
            )
        left.set_yscale("log")
        left.set_ylabel("steady rate, thousand records/s (batches 2-10)")
        left.set_title(
            f"Steady rate; multikafka / floor's best (goal >= {FLOOR_GOAL}) and / read floor",
            fontsize=10,
        )
        right.set_ylabel("Python-worker CPU-s per 1M records")
        right.set_title("Spark Python workers' CPU per record", fontsize=10)
        for ax in (left, right):
            ax.set_xscale("log")
            ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
            ax.set_xlabel("records per micro-batch (maxOffsetsPerTrigger)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(
            f"Ten micro-batches per size, 2 clusters x 4 partitions, local[{rr.CORES}] "
            f"({result['config']['repeat']} rounds, median and min-max)"
        )


def print_table(result: dict[str, Any]) -> None:
    table = Table(title="Steady rate (micro-batches 2-10), median [min-max]")
    for column in (
        "records/batch",
        "multikafka rec/s",
        "CPU-s/1M",
        "tasks/batch",
        "floor 2 tasks",
        "CPU-s/1M",
        "floor 8 tasks",
        "CPU-s/1M",
        "multikafka / floor's best",
        "read floor",
        "multikafka / read floor",
        "fresh read ms",
    ):
        table.add_column(column, justify="right")
    for size, row in result["summary"]["sizes"].items():
        cells = [f"{int(size):,}"]
        for source in SOURCES:
            cells.append(median_range(row[source]["steady_rate"], "{:,.0f}"))
            cells.append(median_range(row[source]["worker_cpu_per_million"], "{:.2f}"))
            if source == "multikafka":
                tasks = row[source]["tasks"][0]
                cells.append(f"{tasks[0]} then {sorted(set(tasks[1:]))}" if tasks else "?")
        cells.append(median_range(row["multikafka/floor_best"], "{:.2f}"))
        cells.append(median_range(row["read_floor"], "{:,.0f}"))
        cells.append(median_range(row["multikafka/read_floor"], "{:.2f}"))
        cells.append(f"{row['fresh_read_ms']:.0f}")
        table.add_row(*cells)
    console.print(table)
    for size, row in result["summary"]["sizes"].items():
        if row["goal/read_floor"]["max"] > 1:
            console.print(
                f"{int(size):,}/batch: {FLOOR_GOAL}x the no-I/O floor's best "
                f"({FLOOR_GOAL * row['floor_best']['median']:,.0f} rec/s) is above the read "
                f"floor ({row['read_floor']['median']:,.0f} rec/s: the floor's time plus the "
                f"plain consumer's) in at least one round: "
                f"{median_range(row['goal/read_floor'], '{:.2f}')}x what a Kafka source can reach"
            )
    big = result["summary"]["large_batch"]
    console.print(
        f"large batches ({big['size']:,}/batch): in-batch "
        f"{median_range(big['in_batch_rate'], '{:,.0f}')} rec/s = "
        f"{median_range(big['in_batch/raw'], '{:.2f}')}x the plain consumer "
        f"({median_range(big['raw_rate'], '{:,.0f}')}); worker CPU "
        f"{median_range(big['worker_cpu/raw_nogc_count'], '{:.2f}')}x the baseline "
        f"({median_range(big['raw_nogc_count_cpu_per_million'], '{:.2f}')} CPU-s/1M)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"sizes": [2_000], "batches": 3, "repeat": 1}, repeat=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per size")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    quiet_logs()
    sizes = sorted(args.sizes)
    result: dict[str, Any] = {
        "benchmark": "small_batches",
        "machine": machine(),
        "config": {"sizes": sizes, "batches": args.batches, "repeat": args.repeat},
    }
    with discovering_spark() as spark:
        runs, records = measure(spark, sizes, args.batches, args.repeat)
    result["records"] = {str(size): n for size, n in records.items()}
    result["runs"] = runs
    result["summary"] = summarize(runs, sizes)
    finish("small_batches", result, args, plot)
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
