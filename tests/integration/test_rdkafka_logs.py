"""librdkafka's log lines go through Python logging, never straight to
stderr: our clients (the coordinator's metadata client, a reader, the dev
stack's topic creation) pointed at a port nobody listens on for a couple of
seconds, where librdkafka fails to connect about twenty times a second."""

from __future__ import annotations

import logging
import time

import pytest

from multikafka.coordinator.clusters.kafka import KafkaMetadataClient
from multikafka.core._ranges import SplitRange
from multikafka.core.exceptions import UnavailableError
from multikafka.core.kafka_log import LOGGER_NAME
from multikafka.core.model import Connection, Properties
from multikafka.devstack import free_port
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent._range_consumer import KafkaRangeConsumer, ReadOutcome

INTERNALS = (
    "multikafka.coordinator.clusters.kafka",
    "multikafka.core._ranges",
    "multikafka.reader_agent._range_consumer",
)


pytestmark = pytest.mark.integration


def _no_librdkafka_output(err: str) -> None:
    # librdkafka's own printer writes "%3|<time>|FAIL|<client>| ..." lines
    assert "|FAIL|" not in err, err
    assert "Connect to" not in err, err
    assert "rdkafka" not in err, err


def _records(caplog: pytest.LogCaptureFixture, component: str) -> list[logging.LogRecord]:
    """Lines of this file's clients (cluster "gone", or a dev-stack client's
    address on 127.0.0.1): other clients of the test session, whose clusters
    were stopped, log to the same loggers."""
    return [
        r
        for r in caplog.records
        if r.name == f"{LOGGER_NAME}.{component}"
        and (
            getattr(r, "cluster", None) == "gone"
            or (component == "devstack" and str(getattr(r, "cluster", "")).startswith("127.0.0.1:"))
        )
    ]


def test_coordinator_client_logs_a_rate_limited_warning_naming_the_cluster(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    client = KafkaMetadataClient(Connection("gone", f"127.0.0.1:{free_port()}", Properties()))
    client.set_log_context([("orders", "gone")])
    try:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            with pytest.raises(UnavailableError):
                client.partition_counts(["orders"], 0.5)
    finally:
        client.close()
    records = _records(caplog, "coordinator")
    assert records, "no librdkafka line reached logging"
    # ~50 failed connection attempts: one line per broker and kind within a minute
    assert 1 <= len(records) <= 3, [r.getMessage() for r in records]
    for r in records:
        assert (r.cluster, r.stream) == ("gone", "orders")  # type: ignore[attr-defined]
    assert any(r.levelno == logging.WARNING and "Connect to" in r.getMessage() for r in records)
    _no_librdkafka_output(capfd.readouterr().err)


def test_a_failed_cluster_is_expected_noise_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    client = KafkaMetadataClient(Connection("gone", f"127.0.0.1:{free_port()}", Properties()))
    client.set_log_context([("orders", "gone")], expected_down=True)
    try:
        with pytest.raises(UnavailableError):
            client.partition_counts(["orders"], 1.0)
    finally:
        client.close()
    records = _records(caplog, "coordinator")
    assert records
    assert {r.levelno for r in records} == {logging.DEBUG}


def test_reader_and_dev_stack_clients_log_unreachable_at_info(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    port = free_port()
    reader = KafkaRangeConsumer(Connection("gone", f"127.0.0.1:{port}", Properties()))
    reader.set_log_context([("orders", "gone")])
    outcome = ReadOutcome()
    started = time.monotonic()
    try:
        got = list(
            reader.read(
                [SplitRange("gone", "orders", 0, 0, 10)],
                outcome,
                include_headers=False,
                fail_on_data_loss=True,
                should_abandon=lambda: time.monotonic() - started > 2.0,
            )
        )
    finally:
        reader.close()
    assert got == []
    assert len(outcome.abandoned) == 1
    with pytest.raises(TimeoutError):
        create_topics(f"127.0.0.1:{port}", {"orders": 1}, timeout_s=1.5)

    for component in ("reader", "devstack"):
        records = _records(caplog, component)
        assert 1 <= len(records) <= 3, (component, [r.getMessage() for r in records])
        assert {r.levelno for r in records} == {logging.INFO}
    (first,) = _records(caplog, "reader")[:1]
    assert (first.cluster, first.stream) == ("gone", "orders")  # type: ignore[attr-defined]
    assert _records(caplog, "devstack")[0].cluster == f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    _no_librdkafka_output(capfd.readouterr().err)
