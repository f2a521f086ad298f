"""The packed environment executors get (``make spark-env``): its size, and
how long the first task of a job takes to start on an executor that never saw
it, against one that has it, and against a job with no archive at all.

    python -m benchmarks.spark_env [--repeat 3] [--jobs 3] [--out docs]

Builds the wheels (``make dist``) and two archives with
``deploy/pack_spark_env.py``: the shipped one (no PySpark) and, for
comparison, one ``--with-pyspark`` (what packing everything
``multikafka-spark`` depends on would ship). Then starts a Spark standalone
cluster from the pip install (one worker, 2 cores; the workers' Python a
fresh virtual environment with nothing installed) and, per round, submits
three applications of ``benchmarks/_first_task_job.py``, ``--jobs`` one-task
jobs each, in client mode:

* ``none``: no archive; the executor runs the workers' bare Python: Spark's
  own floor for a Python task;
* ``archive``: the recipe of docs/spark.md (``--archives …#env``,
  ``PYSPARK_PYTHON=./env/bin/python``): its first job runs on an executor
  that never saw the archive (it fetches and unpacks it before the task
  runs), the later ones on the same executor, which has it;
* ``archive, new app``: the same again, a new application on the same
  worker: Spark unpacks archives per application, into the executor's folder,
  so a worker that unpacked it for an earlier application reuses nothing.

Timed from the driver asking for the job: ``start``, until the task's Python
code runs; ``ready``, until it has also imported the read path
(``multikafka.reader_agent``: pyarrow, confluent-kafka, grpcio; the ``none``
job imports nothing). Also timed: unpacking the archive on this machine
(Python's ``tarfile``), the part of the first task's wait that grows with the
archive.

Writes ``benchmarks/out/spark_env.json`` and ``<out>/img/spark_env.png``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from collections import defaultdict
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
    machine,
    median_range,
    progress_bar,
    summary,
)
from multikafka.devstack.spark_cluster import SparkStandalone

PACK = ROOT / "deploy" / "pack_spark_env.py"
JOB = ROOT / "benchmarks" / "_first_task_job.py"
#: What a multikafka task imports first on an executor.
READ_PATH = "multikafka.reader_agent"
VARIANTS = ("none", "archive", "archive, new app")


def build(tmp: Path, with_pyspark: bool = True) -> dict[str, Path]:
    """The wheels, and the archive without PySpark (and with it, to compare)."""
    wheels = tmp / "wheels"
    subprocess.run(
        ["make", "-s", "-C", str(ROOT), "dist", f"DIST={wheels}", f"PYTHON={sys.executable}"],
        check=True,
        capture_output=True,
    )
    archives = {}
    variants = (("shipped", []), ("with PySpark", ["--with-pyspark"]))
    for name, extra in variants if with_pyspark else variants[:1]:
        out = tmp / f"{name.replace(' ', '-')}.tar.gz"
        argv = [sys.executable, str(PACK), "--wheels", str(wheels), "--out", str(out), *extra]
        subprocess.run(argv, check=True, capture_output=True)
        archives[name] = out
    return archives


def contents(archive: Path) -> dict[str, Any]:
    """Packed and unpacked size, and the largest packages, in MB."""
    parts: dict[str, int] = defaultdict(int)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    for m in members:
        path = m.name.split("/")
        top = path[3] if len(path) > 3 and path[2] == "site-packages" else path[0]
        parts[top] += m.size
    largest = sorted(parts.items(), key=lambda kv: -kv[1])[:8]
    return {
        "packed_mb": round(archive.stat().st_size / 1e6, 1),
        "unpacked_mb": round(sum(m.size for m in members) / 1e6, 1),
        "files": len(members),
        "largest_mb": {name: round(size / 1e6, 1) for name, size in largest},
    }


def unpack_s(archive: Path, into: Path) -> float:
    started = time.monotonic()
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="tar")
    return time.monotonic() - started


class Submitter:
    """Submits the job to the cluster as each variant does; returns its records."""

    def __init__(self, cluster: SparkStandalone, archive: Path, bare: str, tmp: Path) -> None:
        self.cluster = cluster
        self.archive = archive
        self.bare = bare
        self.driver_dir = tmp / "driver"  # the archive unpacked as ./env, as docs/spark.md says
        unpack_s(archive, self.driver_dir / "env")
        self.tmp = tmp
        self.runs = 0

    def run(self, variant: str, jobs: int) -> list[dict[str, Any]]:
        self.runs += 1
        out = self.tmp / f"times-{self.runs}.jsonl"
        argv = [self.cluster.spark_submit(), "--master", self.cluster.url]
        for conf in ("spark.ui.enabled=false", "spark.cores.max=2", "spark.executor.memory=1g"):
            argv += ["--conf", conf]
        python = self.bare
        imports = ""
        if variant != "none":
            argv += ["--archives", f"{self.archive}#env"]
            python, imports = "./env/bin/python", READ_PATH
        argv += [str(JOB), "--out", str(out), "--jobs", str(jobs), "--imports", imports]
        env = {**os.environ, **self.cluster.env()}
        env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
        subprocess.run(
            argv, env=env, cwd=self.driver_dir, check=True, capture_output=True, timeout=600
        )
        records = [json.loads(line) for line in out.read_text().splitlines()]
        want = "/env/bin/python" if variant != "none" else self.bare
        if not all(r["python"].endswith(want) for r in records):
            raise RuntimeError(f"{variant}: tasks ran another Python than {want}: {records}")
        return records


def measure(repeat: int, jobs: int, with_pyspark: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine(), "repeat": repeat, "jobs": jobs}
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp_name, progress_bar() as progress:
        tmp = Path(tmp_name)
        task = progress.add_task("spark env", total=3 + repeat * len(VARIANTS), note="make dist")
        archives = build(tmp, with_pyspark)
        result["archives"] = {name: contents(path) for name, path in archives.items()}
        progress.advance(task)
        progress.update(task, note="unpacking")
        unpacks = [unpack_s(archives["shipped"], tmp / f"unpacked-{i}") for i in range(repeat)]
        result["unpack_s"] = summary(unpacks)
        progress.advance(task)
        bare = tmp / "bare"
        venv.create(bare, with_pip=False)
        progress.update(task, note="standalone cluster")
        cluster = SparkStandalone(tmp / "cluster", python=str(bare / "bin" / "python")).start()
        try:
            submitter = Submitter(cluster, archives["shipped"], str(bare / "bin" / "python"), tmp)
            progress.advance(task)
            for r in range(repeat):
                for variant in VARIANTS:
                    progress.update(task, note=f"round {r + 1}: {variant}")
                    for record in submitter.run(variant, jobs):
                        for key in ("start_s", "ready_s", "job_s"):
                            samples[f"{variant} #{record['job']}"][key].append(record[key])
                    progress.advance(task)
        finally:
            cluster.stop()
    result["jobs_s"] = {
        name: {key: summary(values) for key, values in by_key.items()}
        for name, by_key in samples.items()
    }
    return result


def plot(result: dict[str, Any], png: Path) -> None:
    with figure(png, 1, 2, figsize=(12, 4.2), width_ratios=[1, 2.4]) as (fig, (sizes, times)):
        names = list(result["archives"])
        for i, key in enumerate(("packed_mb", "unpacked_mb")):
            values = [result["archives"][n][key] for n in names]
            xs = [x + (i - 0.5) * 0.38 for x in range(len(names))]
            sizes.bar(xs, values, 0.38, label=key.replace("_mb", ""))
            for x, v in zip(xs, values, strict=True):
                sizes.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
        sizes.set_xticks(range(len(names)), names)
        sizes.set_ylabel("MB")
        sizes.set_title("archive")
        sizes.legend()
        sizes.grid(axis="y", alpha=0.3)
        labels = list(result["jobs_s"])
        bars_with_range(
            times,
            labels,
            [result["jobs_s"][label]["ready_s"] for label in labels],
            label="s until its imports ran (median, min-max)",
            colors=["tab:gray" if label.startswith("none") else "tab:orange" for label in labels],
        )
        times.tick_params(axis="x", labelrotation=30)
        times.set_title("first task of each job (application #job)")
        fig.suptitle("The packed Spark environment: size and first-task start")


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"repeat": 1, "jobs": 1, "pyspark_archive": False}, repeat=3)
    parser.add_argument("--jobs", type=int, default=3, help="one-task jobs per application")
    parser.add_argument(
        "--no-pyspark-archive",
        dest="pyspark_archive",
        action="store_false",
        help="build no archive with PySpark (the size comparison)",
    )
    args = parser.parse_args(argv)
    result = measure(args.repeat, args.jobs, args.pyspark_archive)
    finish("spark_env", result, args, plot)
    sizes = Table(title="archive, MB")
    for col in ("archive", "packed", "unpacked", "files", "largest"):
        sizes.add_column(col)
    for name, a in result["archives"].items():
        largest = ", ".join(f"{k} {v:.0f}" for k, v in list(a["largest_mb"].items())[:5])
        sizes.add_row(
            name, f"{a['packed_mb']:.1f}", f"{a['unpacked_mb']:.1f}", str(a["files"]), largest
        )
    console.print(sizes)
    console.print(f"unpacking the shipped archive: {median_range(result['unpack_s'], '{:.2f}')} s")
    times = Table(title=f"seconds from asking for a job, median \\[min-max] of {args.repeat}")
    for col in ("application, job", "task started", "read path imported", "job done"):
        times.add_column(col)
    for name, r in result["jobs_s"].items():
        times.add_row(
            name,
            median_range(r["start_s"], "{:.2f}"),
            median_range(r["ready_s"], "{:.2f}"),
            median_range(r["job_s"], "{:.2f}"),
        )
    console.print(times)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
