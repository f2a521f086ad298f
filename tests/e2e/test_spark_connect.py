"""The ``multikafka`` format without code, and over Spark Connect.

PySpark finds the source by itself (``pyspark_multikafka``), so a new
session, classic or Spark Connect, reads a stream with no import and no
``register`` call; ``register`` still works in both, Connect included (the
session's parallelism from its configuration). The reads that matter most
also run over Spark Connect in their own files (exactly once across a
restart, a batch read, a live failover, TLS with a reader token: the
``any_spark`` fixture, through the Connect server of the test session's
Spark), and here through ``SparkSession.builder.remote("local[2]")`` in a
process of its own (``remote_local_job.py``)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.spark import MultiKafkaDataSource
from multikafka.spark._compat import SPARK_VERSION
from tests.certs import make_certs
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import batch_source, run_available_now, sink_keys
from tests.helpers import assert_exactly_once, produce_sequence, stream_doc, uid
from tests.secure import start_secure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTERNALS = ("multikafka.spark._compat",)


pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _stream(admin: AdminClient, kafka: KafkaClusters, records: int) -> str:
    return _stream_and_topic(admin, kafka, records)[0]


def _stream_and_topic(
    admin: AdminClient, kafka: KafkaClusters, records: int
) -> tuple[str, str, dict[str, str]]:
    """A stream over one topic on two clusters with ``records`` each: its
    name, the topic and the clusters' bootstraps."""
    a, b = kafka.shared(2)
    topic = uid("nc")
    bootstraps = {"east": a.bootstrap, "west": b.bootstrap}
    for cid, bootstrap in bootstraps.items():
        create_topics(bootstrap, {topic: 2})
        produce_sequence(bootstrap, topic, 2, cid, range(records))
    name = uid("nc")
    admin.put_stream(stream_doc(name, {cid: (bs, [topic]) for cid, bs in bootstraps.items()}))
    return name, topic, bootstraps


def test_a_new_classic_session_finds_the_format_by_itself(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """``spark.newSession()`` shares the Spark but none of the session's
    registrations: the format comes from PySpark's discovery."""
    name = _stream(admin, kafka, 300)
    fresh = spark.newSession()
    query = run_available_now(
        fresh, coordinator.address, name, tmp_path, startingOffsets="earliest"
    )
    assert_exactly_once(sink_keys(fresh, tmp_path), {"east": 300, "west": 300})
    assert query.exception() is None


def test_a_spark_connect_session_reads_with_no_code(
    connect_spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    name = _stream(admin, kafka, 300)
    run_available_now(
        connect_spark, coordinator.address, name, tmp_path, startingOffsets="earliest"
    )
    assert_exactly_once(sink_keys(connect_spark, tmp_path), {"east": 300, "west": 300})


def test_register_works_in_a_spark_connect_session(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
) -> None:
    """A Connect session has no SparkContext: ``register`` takes the
    parallelism from its configuration (``local[2]``) and the format it
    registers reads."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    import multikafka.spark

    port = spark.conf.get("spark.connect.grpc.binding.port")
    session: Any = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    try:
        registered = multikafka.spark.register(session)
        if SPARK_VERSION.startswith("4.0."):  # keeps the source it discovered, with a warning
            assert registered is MultiKafkaDataSource
        else:
            assert registered.default_parallelism == 2
        name = _stream(admin, kafka, 200)
        keys = [
            r["k"]
            for r in batch_source(session, coordinator.address, name)
            .selectExpr("cast(key as string) as k")
            .collect()
        ]
        assert_exactly_once(keys, {"east": 200, "west": 200})
    finally:
        session.stop()


REMOTE_LOCAL_JOB = Path(__file__).with_name("remote_local_job.py")


def _answer(job: subprocess.Popen[str], key: str, timeout_s: float = 180) -> list[str]:
    """The next JSON line the job prints, which must hold ``key``."""
    assert job.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([job.stdout], [], [], deadline - time.monotonic())
        line = job.stdout.readline() if ready else ""
        if line.startswith("{"):
            got: dict[str, list[str]] = json.loads(line)
            return got[key]
        if not line and job.poll() is not None:
            break
    raise AssertionError(f"the job said no {key!r} (exit status {job.poll()})")


def test_a_remote_local_session_reads_exactly_once_over_tls_with_a_token(
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """``SparkSession.builder.remote("local[2]")``, in a process of its own
    (it starts a Spark and its Connect server there, which this process's
    classic session rules out): with no code, a batch read, and a streaming
    query over TLS with a reader token that reads exactly once across a
    restart from its checkpoint, with records produced in between."""
    secure = start_secure(make_coordinator, make_certs(tmp_path / "certs"), tmp_path / "secrets")
    with secure.admin() as admin:
        name, topic, bootstraps = _stream_and_topic(admin, kafka, 200)
    argv = [sys.executable, str(REMOTE_LOCAL_JOB), "--coordinator", secure.address]
    argv += ["--stream", name, "--tls-ca", str(secure.certs.ca.cert_path)]
    argv += ["--token-file", str(secure.reader_token_file), "--out", str(tmp_path / "job")]
    with (
        (tmp_path / "job.log").open("w") as log,
        subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            # Spark's Python workers (the format's discovery among them): this
            # interpreter, which has multikafka, not the machine's python3.
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        ) as job,
    ):
        assert job.stdin is not None
        try:
            assert_exactly_once(_answer(job, "batch"), {"east": 200, "west": 200})
            job.stdin.write("go\n")
            job.stdin.flush()
            assert_exactly_once(_answer(job, "stream0"), {"east": 200, "west": 200})
            for cid, bootstrap in bootstraps.items():
                produce_sequence(bootstrap, topic, 2, cid, range(200, 300))
            job.stdin.write("go\n")
            job.stdin.flush()
            assert_exactly_once(_answer(job, "stream1"), {"east": 300, "west": 300})
            assert job.wait(120) == 0, (tmp_path / "job.log").read_text()[-3000:]
        finally:
            if job.poll() is None:
                job.kill()
