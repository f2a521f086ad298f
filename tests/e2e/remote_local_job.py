"""A job on ``SparkSession.builder.remote("local[2]")``: PySpark starts a
local Spark Connect server and the session talks to it over gRPC, as a job on
a managed runtime does (``test_spark_connect.py``). It imports nothing of
multikafka, and its arguments name files, never a secret.

    python remote_local_job.py --coordinator HOST:PORT --stream NAME \\
        --tls-ca ca.pem --token-file reader.token --out DIR

Then, one line each on stdout (JSON): the keys of a batch read; after the
line ``go`` on stdin, nothing more: the keys a ``Trigger.AvailableNow`` query
wrote, run twice on the same checkpoint with a ``go`` before each run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--coordinator", "--stream", "--tls-ca", "--token-file"):
        parser.add_argument(name, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.remote("local[2]").getOrCreate()

    def source(reader):  # type: ignore[no-untyped-def]
        return (
            reader.format("multikafka")
            .option("coordinator", args.coordinator)
            .option("stream", args.stream)
            .option("startingOffsets", "earliest")
            .option("coordinatorTlsCa", args.tls_ca)
            .option("coordinatorTokenFile", args.token_file)
            .load()
        )

    keys = [r["k"] for r in source(spark.read).selectExpr("cast(key as string) as k").collect()]
    print(json.dumps({"batch": keys}), flush=True)
    sink, checkpoint = args.out / "sink", args.out / "checkpoint"
    for run in range(2):  # the second run restarts from the first's checkpoint
        if sys.stdin.readline().strip() != "go":
            return 2
        query = (
            source(spark.readStream)
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        rows = spark.read.parquet(str(sink)).selectExpr("cast(key as string) as k").collect()
        print(json.dumps({f"stream{run}": [r["k"] for r in rows]}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
