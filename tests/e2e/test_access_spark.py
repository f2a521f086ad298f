"""Team A's Spark job (classic and Spark Connect) and standalone Reader read
``orders-*`` and are refused ``payments``, with team A's reader token and
the issue's two-team access policy (tests/teams.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from multikafka.core.exceptions import PermissionDeniedError
from multikafka.reader import Reader
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import batch_source, run_available_now, sink_keys
from tests.helpers import assert_exactly_once
from tests.teams import RECORDS, Teams, start_teams

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def teams(
    etcd_url: str, kafka: KafkaClusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Teams]:
    a, b = kafka.shared(2)
    world = start_teams(etcd_url, a, b, tmp_path_factory.mktemp("teams"))
    try:
        yield world
    finally:
        world.thread.stop()


def test_team_a_job_reads_orders_and_is_refused_payments(
    any_spark: SparkSession, teams: Teams, tmp_path: Path
) -> None:
    from pyspark.errors import PySparkException

    options = {
        "startingOffsets": "earliest",
        "coordinatorTokenFile": str(teams.token_file("team-a-jobs", tmp_path)),
        "coordinatorTimeoutMs": 10_000,
    }
    run_available_now(any_spark, teams.address, "orders-us", tmp_path / "orders", **options)
    assert_exactly_once(sink_keys(any_spark, tmp_path / "orders"), {"orders-us": RECORDS})
    # Refused as the driver first asks the coordinator (a batch read: the
    # same driver calls, without a streaming query to start and stop).
    with pytest.raises(PySparkException) as refused:
        batch_source(any_spark, teams.address, "payments", **options).collect()
    message = str(refused.value)
    assert "PermissionDeniedError" in message or "PERMISSION_DENIED" in message, message
    assert "'payments'" in message
    assert "reader role" in message
    assert "orders-eu" not in message
    assert teams.tokens["team-a-jobs"] not in message


def test_team_a_standalone_reader_reads_orders_and_is_refused_payments(
    teams: Teams, tmp_path: Path
) -> None:
    token_file = str(teams.token_file("team-a-jobs", tmp_path))
    keys = []
    with Reader(
        teams.address, "orders-us", starting_offsets="earliest", token_file=token_file
    ) as reader:
        for batch in reader.batches(idle_timeout_s=1.0):
            keys += [k.decode() for k in batch.column("key").to_pylist()]
    assert_exactly_once(keys, {"orders-us": RECORDS})
    payments = Reader(teams.address, "payments", starting_offsets="earliest", token_file=token_file)
    with payments, pytest.raises(PermissionDeniedError) as refused:
        list(payments.batches(idle_timeout_s=1.0))
    assert "'payments'" in str(refused.value)
    assert "orders" not in str(refused.value)
