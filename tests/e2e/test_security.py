"""A Spark query against a coordinator serving TLS with admin and reader
tokens (certificates made here; real etcd, tansu, Spark): it reads exactly
once, its agents report over TLS with the token, the CA travels inside the
tasks as PEM, and without the token it is refused."""

from __future__ import annotations

import json
import pickle
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from multikafka.core.exceptions import ValidationError
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import ReaderAgent
from tests.certs import make_certs
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import run_available_now, sink_keys
from tests.helpers import assert_exactly_once, eventually, produce_sequence, stream_doc, uid
from tests.secure import Secure, start_secure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTERNALS = (
    "multikafka.spark._compat",
    "multikafka.spark._options",
    "multikafka.spark._source",
)


pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = 400


@dataclass
class Secured(Secure):
    """A TLS coordinator with tokens, and a two-partition stream on it whose
    cluster has a ``sasl.password``."""

    stream: str
    topic: str
    secret: str

    def tls_options(self, *, token: bool = True) -> dict[str, object]:
        options: dict[str, object] = {
            "startingOffsets": "earliest",
            "coordinatorTlsCa": str(self.certs.ca.cert_path),
            "coordinatorTimeoutMs": 10_000,
        }
        if token:
            options["coordinatorTokenFile"] = str(self.reader_token_file)
        return options

    def wait_for_stream_reports(self) -> None:
        """Until the agents (in Spark's Python workers) have reported their
        reads of both partitions (read marks): they reached the coordinator."""
        self.wait_for_reports(self.stream, [f"east/{self.topic}/{p}" for p in (0, 1)])


def _secured(
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
    *,
    mtls: bool = False,
) -> Secured:
    secure = start_secure(
        make_coordinator, make_certs(tmp_path / "certs"), tmp_path, client_ca=mtls
    )
    (a,) = kafka.shared(1)
    topic = uid("sec")
    create_topics(a.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "sec", range(RECORDS))
    name = uid("sec")
    secret = f"s3cret-{secrets.token_hex(16)}"
    doc = stream_doc(name, {"east": (a.bootstrap, [topic])})
    doc["clusters"]["east"]["properties"]["sasl.password"] = secret
    with secure.admin() as admin:
        admin.put_stream(doc)
    return Secured(**vars(secure), stream=name, topic=topic, secret=secret)


def test_query_over_tls_with_reader_token_reads_exactly_once(
    any_spark: SparkSession,
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    spark = any_spark  # classic, then Spark Connect
    s = _secured(make_coordinator, kafka, tmp_path)
    out = tmp_path / "out"
    query = run_available_now(spark, s.address, s.stream, out, **s.tls_options())
    assert_exactly_once(sink_keys(spark, out), {"sec": RECORDS})

    # The agents in Spark's Python workers reported their reads over TLS with
    # the token (read marks), and are registered (ListReaders).
    s.wait_for_stream_reports()
    with s.admin() as admin:
        readers = eventually(admin.readers, timeout_s=30)
        assert len(readers) >= 1
        answers = [str(admin.get_stream(s.stream)), *map(str, readers), *map(str, admin.queries())]
    # No secret (nor token) in the query's progress or any admin answer.
    answers.append(json.dumps(query.recentProgress, default=str))
    text = "\n".join(answers)
    assert s.secret not in text
    assert s.reader_token not in text
    assert s.admin_token not in text


def test_query_with_a_client_certificate_and_no_token_under_mutual_tls(
    spark: SparkSession,
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    s = _secured(make_coordinator, kafka, tmp_path, mtls=True)
    options = {
        **s.tls_options(token=False),
        "coordinatorTlsCert": str(s.certs.client.cert_path),
        "coordinatorTlsKey": str(s.certs.client.key_path),
    }
    out = tmp_path / "out"
    run_available_now(spark, s.address, s.stream, out, **options)
    assert_exactly_once(sink_keys(spark, out), {"sec": RECORDS})
    # The executors' agents presented the certificate too: their reports arrived.
    s.wait_for_stream_reports()
    with s.admin() as admin:
        assert eventually(admin.readers, timeout_s=30)


def test_query_without_the_reader_token_is_refused(
    spark: SparkSession,
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    from pyspark.errors import PySparkException

    s = _secured(make_coordinator, kafka, tmp_path)
    with pytest.raises(PySparkException) as refused:
        run_available_now(
            spark, s.address, s.stream, tmp_path / "none", **s.tls_options(token=False)
        )
    message = str(refused.value)
    assert "AuthenticationError" in message or "UNAUTHENTICATED" in message, message
    assert "reader token" in message
    assert "coordinatorTokenFile" in message
    assert s.secret not in message

    # A token the coordinator does not know.
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-a-token-of-this-coordinator")
    options = {**s.tls_options(token=False), "coordinatorTokenFile": str(wrong)}
    with pytest.raises(PySparkException) as denied:
        run_available_now(spark, s.address, s.stream, tmp_path / "admin", **options)
    message = str(denied.value)
    assert "AuthenticationError" in message or "UNAUTHENTICATED" in message, message
    assert "not known to this coordinator" in message
    assert "not-a-token-of-this-coordinator" not in message
    for leaked in (s.secret, s.admin_token, s.reader_token):
        assert leaked not in message
    assert sink_keys(spark, tmp_path / "none") == []
    assert sink_keys(spark, tmp_path / "admin") == []


def test_the_ca_travels_inside_tasks_as_pem(
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
    agents: list[ReaderAgent],
) -> None:
    """What Spark ships to executors carries the CA's PEM (and the token), not
    the driver's file paths: with the files gone, an unpickled partition
    still reaches the coordinator over TLS."""
    from multikafka.spark._compat import ReadAllAvailable
    from multikafka.spark._options import NAMES, parse_options
    from multikafka.spark._source import MultiKafkaStreamReader

    s = _secured(make_coordinator, kafka, tmp_path)
    # The driver's files: copies this test may remove.
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    ca_file = driver_dir / "ca.pem"
    token_file = driver_dir / "reader.token"
    shutil.copy(s.certs.ca.cert_path, ca_file)
    shutil.copy(s.reader_token_file, token_file)
    ca_pem = ca_file.read_bytes()
    options = {
        "coordinator": s.address,
        "stream": s.stream,
        "startingOffsets": "earliest",
        "coordinatorTlsCa": str(ca_file),
        "coordinatorTokenFile": str(token_file),
        "minPartitions": "2",
    }
    reader = MultiKafkaStreamReader(parse_options(options, streaming=True))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        parts = reader.partitions(start, end)
    finally:
        reader.stop()
    assert len(parts) >= 2
    for p in parts:
        assert p.task.coordinator is not None
        assert p.task.coordinator.tls_ca == ca_pem
        assert p.task.coordinator.token == s.reader_token
        shown = repr(p)
        assert str(ca_file) not in shown
        for leaked in (s.reader_token, s.secret, ca_pem.decode()):
            assert leaked not in shown
    shipped = pickle.dumps(parts)
    assert str(ca_file).encode() not in shipped, "a driver-local path travels to executors"

    # The executor side has no such files.
    ca_file.unlink()
    token_file.unlink()
    with pytest.raises(ValidationError, match="cannot read"):
        parse_options(options, streaming=True).connect_config(NAMES)
    received = pickle.loads(shipped)
    assert all(p.task.coordinator.tls_ca == ca_pem for p in received)
    agent = ReaderAgent(heartbeat_interval_s=0.5)
    agents.append(agent)
    keys = [
        k.decode()
        for p in received
        for batch in agent.read(p.task)
        for k in batch.column("key").to_pylist()
    ]
    assert_exactly_once(keys, {"sec": RECORDS})
    # It registered and reported over TLS with what the task carried.
    s.wait_for_stream_reports()
    with s.admin() as admin:
        eventually(lambda: agent.agent_id in {r.agent_id for r in admin.readers()}, timeout_s=15)


def test_the_standalone_reader_needs_the_reader_token_and_speaks_tls(
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``multikafka.Reader`` over TLS with the reader token from a file reads
    exactly once; without a token it is refused, saying how to give one, and
    nothing secret appears in the error or the reader's repr."""
    from multikafka import AuthenticationError, Reader

    s = _secured(make_coordinator, kafka, tmp_path)
    monkeypatch.delenv("MULTIKAFKA_READER_TOKEN", raising=False)
    monkeypatch.delenv("MULTIKAFKA_READER_TOKEN_FILE", raising=False)
    with Reader(
        s.address,
        s.stream,
        starting_offsets="earliest",
        tls_ca=str(s.certs.ca.cert_path),
        token_file=str(s.reader_token_file),
    ) as reader:
        keys = [
            k.decode()
            for batch in reader.batches(idle_timeout_s=1)
            for k in batch.column("key").to_pylist()
        ]
        shown = repr(reader)
    assert_exactly_once(keys, {"sec": RECORDS})
    assert s.reader_token not in shown

    with (
        Reader(
            s.address,
            s.stream,
            starting_offsets="earliest",
            tls_ca=str(s.certs.ca.cert_path),
            coordinator_timeout_s=5,
        ) as refused,
        pytest.raises(AuthenticationError) as denied,
    ):
        next(refused.batches(idle_timeout_s=1))
    message = str(denied.value)
    assert "token_file" in message
    for leaked in (s.secret, s.admin_token, s.reader_token):
        assert leaked not in message
