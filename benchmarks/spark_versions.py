"""What each supported PySpark gets: read rate and Python-worker CPU per version.

    python -m benchmarks.spark_versions [--versions 4.0.5 4.1.4 4.2.1 4.3.0]
        [--records 500000] [--repeat 2] [--out docs]

For each version, in its own venv (``.venv-spark/<version>``, the one
``make test-spark-matrix`` uses), a child run of this module starts a local
stack (etcd, two tansu clusters, a coordinator, Spark ``local[2]``), produces
``--records`` records and measures, ``--repeat`` times after one warm-up:

* ``raw``: plain confluent-kafka consumers on the same brokers (the rate
  baseline); ``raw_nogc_count``: the same, counting only, GC off (the CPU
  baseline) — :mod:`benchmarks.read_rate`'s baselines;
* ``one_batch``: ``Trigger.AvailableNow`` over the whole stream, no limit:
  one micro-batch; its rate and the CPU of Spark's Python workers;
* ``ten_batches``: the default trigger with ``maxOffsetsPerTrigger`` a tenth
  of the stream, stopped when all is read: the steady rate is that of the
  micro-batches after the first (Spark's ``triggerExecution`` times). On
  Spark 4.0 and 4.1 the source applies the limit itself
  (:mod:`multikafka.spark._compat`);
* ``floor_one_batch`` / ``floor_ten_batches_2`` / ``floor_ten_batches_8``:
  Spark's own floor, a no-I/O Python stream source in the same session
  handing out the same record counts as Arrow batches (a 100-byte ``value``,
  ``partition``, ``offset``), in 8 tasks (one per split, as multikafka
  plans without a known parallelism) and, for the ten batches, also in 2
  (the cores).

Rates are records per second; ratios per round against that round's ``raw``;
CPU in seconds per million records, against ``raw_nogc_count``. Results:
``benchmarks/out/spark_versions.json`` and ``<out>/img/spark_versions.png``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks._common import (
    ROOT,
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    json_folder,
    machine,
    median_range,
    progress_bar,
    quiet_logs,
    summary,
)

VERSIONS = ("4.0.5", "4.1.4", "4.2.1", "4.3.0")
METHODS = (
    "raw",
    "raw_nogc_count",
    "one_batch",
    "ten_batches",
    "floor_one_batch",
    "floor_ten_batches_2",
    "floor_ten_batches_8",
)
#: The floor's runs: (available_now, tasks, batches).
FLOOR = {
    "floor_one_batch": (True, 8, 1),
    "floor_ten_batches_2": (False, 2, 10),
    "floor_ten_batches_8": (False, 8, 10),
}
BATCHES = 10


def register_floor(spark: Any) -> str:
    """Register ``floor``: a Python stream source that reads nothing. Its
    offsets count records (``total``, in steps of ``step``); a task hands
    out its share as slices of one Arrow batch made once per worker. It
    takes a start and a limit where Spark (4.2+) passes them and keeps
    track of its position where Spark does not."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class FloorReader(DataSourceStreamReader):
        def __init__(self, total: int, step: int, tasks: int) -> None:
            self.total, self.step, self.tasks = total, step, tasks
            self.next = 0

        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            base = self.next if start is None else int(start["o"])
            self.next = min(base + self.step, self.total)
            return {"o": self.next}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            n = end["o"] - start["o"]
            share = [n // self.tasks + (i < n % self.tasks) for i in range(self.tasks)]
            return [InputPartition(k) for k in share if k]

        def read(self, partition: Any) -> Iterator[Any]:
            import pyarrow as pa

            chunk = _FLOOR_BATCH.get("batch")
            if chunk is None:
                rows = 10_000
                chunk = pa.RecordBatch.from_pydict(
                    {
                        "value": pa.array([b"v" * 100] * rows, pa.binary()),
                        "partition": pa.array([0] * rows, pa.int32()),
                        "offset": pa.array(range(rows), pa.int64()),
                    }
                )
                _FLOOR_BATCH["batch"] = chunk
            left = int(partition.value)
            while left > 0:
                take = min(left, chunk.num_rows)
                yield chunk.slice(0, take)
                left -= take

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor"

        def schema(self) -> str:
            return "value binary, partition int, offset long"

        def streamReader(self, schema: Any) -> FloorReader:
            o = self.options
            return FloorReader(int(o["total"]), int(o["step"]), int(o["tasks"]))

    spark.dataSource.register(FloorSource)
    return "floor"


#: The floor's Arrow batch, made once per worker process.
_FLOOR_BATCH: dict[str, Any] = {}


def spark_run(
    method: str, records: int, per_trigger: int, floor: str
) -> tuple[str, dict[str, str], bool]:
    """The source, its options and whether the trigger is AvailableNow of a
    Spark ``method``."""
    if method in FLOOR:
        available_now, tasks, batches = FLOOR[method]
        step = -(-records // batches)
        options = {"total": str(records), "step": str(step), "tasks": str(tasks)}
        return floor, options, available_now
    limit = {"maxOffsetsPerTrigger": str(per_trigger)} if method == "ten_batches" else {}
    return "multikafka", limit, method == "one_batch"


def child(records: int, repeat: int, warmup: int, out: Path) -> None:
    """Measure in this interpreter's PySpark; write the runs to ``out``."""
    import pyspark

    from benchmarks import read_rate as rr

    quiet_logs()
    runs: list[dict[str, Any]] = []
    with rr.spark_session() as spark, rr.started_stack(records, 100) as setup:
        per_trigger = max(-(-setup.expected // BATCHES), 1)
        floor = register_floor(spark)
        with progress_bar() as progress:
            task = progress.add_task(
                f"PySpark {pyspark.__version__}", total=(warmup + repeat) * len(METHODS), note=""
            )
            for rnd in range(warmup + repeat):
                for method in METHODS:
                    progress.update(task, note=method)
                    cpu0 = rr.cpu_snapshot()
                    if method.startswith("raw"):
                        run = rr.read_raw(
                            setup, lambda n: None, count_only=method == "raw_nogc_count"
                        )
                    else:
                        source, options, available_now = spark_run(
                            method, setup.expected, per_trigger, floor
                        )
                        run = rr.read_spark(
                            spark,
                            setup,
                            lambda n: None,
                            method=method,
                            options=options,
                            source=source,
                            available_now=available_now,
                        )
                    run.extra["cpu_s"] = rr.cpu_by_role(cpu0)
                    if run.records < setup.expected:
                        raise RuntimeError(f"{method} read {run.records:,} of {setup.expected:,}")
                    progress.advance(task)
                    if rnd >= warmup:
                        runs.append(
                            {
                                "method": method,
                                "round": rnd - warmup,
                                "records": run.records,
                                "seconds": run.seconds,
                                "rate": run.rate,
                                "reader_cpu_s": rr.reader_cpu(run),
                                "batches": run.extra.get("batches"),
                                "steady_rate": run.extra.get("steady_rate"),
                                "trigger_rate": run.extra.get("trigger_rate"),
                            }
                        )
        result = {"spark": pyspark.__version__, "records": setup.expected, "runs": runs}
    out.write_text(json.dumps(result))


def summarize(version: dict[str, Any]) -> dict[str, Any]:
    """Per version: rates, ratios to raw and CPU per million records."""
    runs = version["runs"]
    rounds = sorted({r["round"] for r in runs})
    by = {(r["method"], r["round"]): r for r in runs}
    scale = 1e6 / version["records"]

    def per_round(method: str, key: str = "rate") -> list[float]:
        return [float(by[(method, i)][key] or 0) for i in rounds]

    raw = per_round("raw")
    one = per_round("one_batch")
    steady = per_round("ten_batches", "steady_rate")
    floor_one = per_round("floor_one_batch")
    floor_steady = [
        max(a, b)
        for a, b in zip(
            per_round("floor_ten_batches_2", "steady_rate"),
            per_round("floor_ten_batches_8", "steady_rate"),
            strict=True,
        )
    ]
    cpu = {m: [c * scale for c in per_round(m, "reader_cpu_s")] for m in METHODS}

    def ratio(a: list[float], b: list[float]) -> dict[str, float]:
        return summary([x / y for x, y in zip(a, b, strict=True) if y])

    return {
        "spark": version["spark"],
        "records": version["records"],
        "raw_rate": summary(raw),
        "one_batch_rate": summary(one),
        "one_batch/raw": ratio(one, raw),
        "floor_one_batch_rate": summary(floor_one),
        "one_batch/floor": ratio(one, floor_one),
        "steady_rate": summary(steady),
        "steady/raw": ratio(steady, raw),
        "floor_steady_rate": {
            m: summary(per_round(m, "steady_rate"))
            for m in ("floor_ten_batches_2", "floor_ten_batches_8")
        },
        "steady/floor_best": ratio(steady, floor_steady),
        "ten_batches_batches": [by[("ten_batches", i)]["batches"] for i in rounds],
        "cpu_per_million": {m: summary(v) for m, v in cpu.items()},
        "worker_cpu/raw_nogc_count": ratio(cpu["one_batch"], cpu["raw_nogc_count"]),
        "worker_cpu/floor": ratio(cpu["one_batch"], cpu["floor_one_batch"]),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    rows = result["versions"]
    names = [r["spark"] for r in rows]
    with figure(path, 1, 3, figsize=(14, 4.2)) as (fig, axes):
        colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2"]
        bars = (
            ([r["one_batch/raw"] for r in rows], "one micro-batch: rate / plain consumer"),
            (
                [r["steady/raw"] for r in rows],
                f"{BATCHES} micro-batches: steady rate / plain consumer",
            ),
            (
                [r["cpu_per_million"]["one_batch"] for r in rows],
                "Python-worker CPU-s per 1M records",
            ),
        )
        for ax, (values, label) in zip(axes, bars, strict=True):
            bars_with_range(ax, names, values, label=label, colors=colors)
            ax.set_xlabel("PySpark")
        # Spark's floor (the no-I/O source) and the plain consumer on the same axes.
        lines = (
            (0, [r["floor_one_batch_rate"]["median"] / r["raw_rate"]["median"] for r in rows],
             "k--", "no-I/O Python source (Spark's floor)"),
            (1, [max(v["median"] for v in r["floor_steady_rate"].values()) / r["raw_rate"]["median"]
                 for r in rows], "k--", "no-I/O source, better of 2 and 8 tasks"),
            (2, [r["cpu_per_million"]["floor_one_batch"]["median"] for r in rows],
             "k--", "no-I/O Python source"),
            (2, [r["cpu_per_million"]["raw_nogc_count"]["median"] for r in rows],
             "k:", "plain consumer (count only)"),
        )  # fmt: skip
        for i, ys, style, label in lines:
            axes[i].plot(names, ys, style, marker="o", label=label)
        for ax in axes:
            ax.legend(fontsize=8)
        fig.suptitle(f"multikafka per PySpark version ({result['records']:,} records, local[2])")


def print_table(result: dict[str, Any]) -> None:
    table = Table(title=f"Per PySpark version, {result['records']:,} records, median [min-max]")
    for column in (
        "PySpark",
        "plain consumer rec/s",
        "one batch rec/s",
        "/ plain",
        "/ floor",
        f"{BATCHES} batches steady rec/s",
        "/ plain",
        "/ floor's best",
        "worker CPU-s/1M",
        "floor CPU-s/1M",
        "plain CPU-s/1M",
    ):
        table.add_column(column, justify="right")
    for r in result["versions"]:
        cpu = r["cpu_per_million"]
        table.add_row(
            r["spark"],
            median_range(r["raw_rate"], "{:,.0f}"),
            median_range(r["one_batch_rate"], "{:,.0f}"),
            median_range(r["one_batch/raw"], "{:.2f}"),
            median_range(r["one_batch/floor"], "{:.2f}"),
            median_range(r["steady_rate"], "{:,.0f}"),
            median_range(r["steady/raw"], "{:.2f}"),
            median_range(r["steady/floor_best"], "{:.2f}"),
            median_range(cpu["one_batch"], "{:.2f}"),
            median_range(cpu["floor_one_batch"], "{:.2f}"),
            median_range(cpu["raw_nogc_count"], "{:.2f}"),
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(
        __doc__,
        smoke={"versions": ["current"], "records": 20_000, "repeat": 1, "warmup": 0},
        repeat=2,
    )
    parser.add_argument(
        "--versions",
        nargs="+",
        default=list(VERSIONS),
        metavar="VERSION",
        help="each in the venv make test-spark-matrix makes; 'current': this Python's PySpark",
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.child is not None:
        child(args.records, args.repeat, args.warmup, args.child)
        return 0

    sys.path.insert(0, str(ROOT / "deploy"))
    from spark_matrix import venv_for  # the matrix's venvs

    result: dict[str, Any] = {
        "benchmark": "spark_versions",
        "machine": machine(),
        "records": args.records,
        "config": {"repeat": args.repeat, "warmup": args.warmup, "batches": BATCHES},
        "versions": [],
    }
    out_dir = json_folder(args)
    out_dir.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        # "current": this interpreter's PySpark (no matrix venv needed)
        python = sys.executable if version == "current" else venv_for(version) / "bin" / "python"
        part = out_dir / f"spark_versions.{version}.json"
        console.rule(f"PySpark {version}")
        counts = [f"--records={args.records}", f"--repeat={args.repeat}", f"--warmup={args.warmup}"]
        subprocess.run(
            [str(python), "-m", "benchmarks.spark_versions", "--child", str(part), *counts],
            cwd=ROOT,
            check=True,
        )
        measured = summarize(json.loads(part.read_text()))
        result["versions"].append(measured)
        result["records"] = measured["records"]
    finish("spark_versions", result, args, plot)
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
