"""A local SparkSession with the multikafka source registered."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import multikafka.spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_spark(
    app_name: str = "multikafka",
    *,
    cores: int = 2,
    connect_port: int | None = None,
    max_failures: int = 1,
    register: bool = True,
) -> SparkSession:
    """``local[cores]`` Spark whose Python workers run this interpreter.
    With ``connect_port``, the same Spark also serves Spark Connect on
    ``127.0.0.1:<connect_port>`` (its plugin): Connect clients reach it at
    ``sc://127.0.0.1:<connect_port>``.

    Start it before any gRPC server or channel is active in this process:
    launching the JVM forks, and gRPC's fork handlers break a fork taken while
    its threads run (set ``GRPC_ENABLE_FORK_SUPPORT=0`` to be safe either way).

    ``max_failures``: attempts of a task before its job fails. Local mode
    ignores ``spark.task.maxFailures`` and tries once unless the master says
    otherwise (``local[N,F]``); a cluster's default is 4.

    ``register``: register the source with the session's parallelism
    (:func:`multikafka.spark.register`); without, the session uses the one
    PySpark discovers, as users' sessions do.
    """
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(
            f"local[{cores}]" if max_failures == 1 else f"local[{cores},{max_failures}]"
        )
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        # Its console progress bars would write over the caller's output.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if connect_port is not None:
        builder = (
            builder.config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
            .config("spark.connect.grpc.binding.address", "127.0.0.1")
            .config("spark.connect.grpc.binding.port", str(connect_port))
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register:
        multikafka.spark.register(spark)
    return spark
