"""A job ``spark-submit`` runs (``test_spark_standalone.py``): a multikafka
query into Parquet, over TLS with a reader token, until the file ``stop``
appears in its output folder. It imports nothing of multikafka: PySpark finds
the format by itself. Its arguments name files, never a secret.

    spark-submit ... submitted_job.py --coordinator HOST:PORT --stream NAME \\
        --tls-ca ca.pem --token-file reader.token --out DIR

It writes ``DIR/run-id`` once the query runs, and exits 1 if the query failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--coordinator", "--stream", "--tls-ca", "--token-file"):
        parser.add_argument(name, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("multikafka-submitted").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    df = (
        spark.readStream.format("multikafka")
        .option("coordinator", args.coordinator)
        .option("stream", args.stream)
        .option("startingOffsets", "earliest")
        .option("queryId", args.stream)
        .option("coordinatorTlsCa", args.tls_ca)
        .option("coordinatorTokenFile", args.token_file)
        .load()
    )
    query = (
        df.writeStream.format("parquet")
        .option("path", str(args.out / "sink"))
        .option("checkpointLocation", str(args.out / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    written = args.out / "run-id.tmp"
    written.write_text(str(query.runId))
    written.rename(args.out / "run-id")
    while query.isActive and not (args.out / "stop").exists():
        query.awaitTermination(0.2)
    failed = query.exception()
    query.stop()
    spark.stop()
    if failed is not None:
        print(f"query failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
