"""The job ``benchmarks.spark_env`` submits: once its executor has
registered, ``--jobs`` one-task jobs, each timing when its Python code
starts on the executor (scheduling, the executor fetching and unpacking
archives it has not seen, a Python worker starting) and, with ``--imports``,
when those imports are done too (the read path: what a multikafka task
imports first). One JSON line per job into ``--out``:
``{"job": n, "start_s": ..., "ready_s": ..., "python": ...}``.

    spark-submit [--archives env.tar.gz#env] _first_task_job.py --out times.jsonl

It imports nothing beyond PySpark on the driver.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from pyspark.sql import SparkSession


def _task(imports: list[str]) -> object:
    def run(_: object) -> tuple[float, float, str]:
        started = time.time()
        for module in imports:
            importlib.import_module(module)
        return started, time.time(), sys.executable

    return run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--imports", default="", help="modules, comma-separated")
    args = parser.parse_args()
    imports = [m for m in args.imports.split(",") if m]
    spark = SparkSession.builder.appName("multikafka-first-task").getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    # The executor registered (its JVM runs): what is timed starts after it.
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 2:  # the driver and one executor
        time.sleep(0.05)
    with open(args.out, "a") as out:
        for job in range(1, args.jobs + 1):
            asked = time.time()
            ((started, ready, python),) = sc.parallelize([0], 1).map(_task(imports)).collect()
            record = {
                "job": job,
                "start_s": started - asked,
                "ready_s": ready - asked,
                "job_s": time.time() - asked,
                "python": python,
            }
            out.write(json.dumps(record) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
