"""Spark Kafka-source options beyond the basics: minOffsetsPerTrigger /
maxTriggerDelay, startingOffsetsByTimestamp (+ strategy),
endingOffsetsByTimestamp, and kafka.* librdkafka settings (checked, merged
into the reader consumers, never shown); the agent keeping a consumer per
query overrides. The standalone reader's equivalents map onto the same
ReadOptions: tests/unit/test_read_options.py."""

from __future__ import annotations

import pytest

from multikafka.core._kafka_config import client_config
from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import Connection
from multikafka.reader_agent import ReaderAgent, ReadOptions, ReadTask
from multikafka.reader_agent._overrides import Overrides, check_overrides, with_overrides
from multikafka.reader_agent._range_consumer import KafkaRangeConsumer
from multikafka.spark._options import KNOWN, parse_options
from multikafka.v1 import reader_pb2
from multikafka.v1.planner_pb2 import Position
from tests.helpers import by_split
from tests.unit.test_agent import FakeFactory

INTERNALS = (
    "multikafka.core._kafka_config",
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._overrides",
    "multikafka.reader_agent._range_consumer",
    "multikafka.spark._options",
)


BASE = {"coordinator": "127.0.0.1:7070", "stream": "orders"}


def parse(streaming: bool = True, **options: str) -> ReadOptions:
    return parse_options({**BASE, **options}, streaming=streaming)


def refused(streaming: bool = True, **options: str) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse(streaming, **options)
    return info.value


# -- minOffsetsPerTrigger / maxTriggerDelay -----------------------------------


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [
        ("15m", 900.0),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("2000", 2.0),  # a plain number is ms, as Spark
        ("1h", 3600.0),
        ("2min", 120.0),
        ("1d", 86400.0),
        (" 10S ", 10.0),
    ],
)
def test_max_trigger_delay_takes_sparks_durations(delay: str, seconds: float) -> None:
    o = parse(minOffsetsPerTrigger="100", maxTriggerDelay=delay)
    assert o.min_records_per_batch == 100
    assert o.max_batch_delay_s == pytest.approx(seconds)


def test_max_trigger_delay_defaults_to_15_minutes() -> None:
    assert parse(minOffsetsPerTrigger="1").max_batch_delay_s == 900.0
    assert parse().min_records_per_batch is None


@pytest.mark.parametrize("delay", ["1.5s", "fast", "10 weeks", "-5s", ""])
def test_bad_durations_say_what_to_write(delay: str) -> None:
    err = refused(minOffsetsPerTrigger="1", maxTriggerDelay=delay)
    assert err.field == "option maxtriggerdelay"
    assert "15m, 30s or 500ms" in err.problem


def test_min_above_max_is_refused() -> None:
    err = refused(minOffsetsPerTrigger="101", maxOffsetsPerTrigger="100")
    assert err.field == "option minoffsetspertrigger"
    assert "must not exceed the maximum" in err.problem
    assert parse(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="100").max_records_per_batch


def test_delay_without_min_is_refused() -> None:
    err = refused(maxTriggerDelay="1m")
    assert "only with minOffsetsPerTrigger" in err.problem


def test_min_must_be_positive() -> None:
    assert "at least 1" in refused(minOffsetsPerTrigger="0").problem


# -- startingOffsetsByTimestamp -------------------------------------------------


@pytest.mark.parametrize(
    "times",
    [
        '{"east": {"orders": {"0": 1000, "2": 2000}}}',
        '{"east/orders/0": 1000, "east/orders/2": 2000}',
    ],
)
def test_split_times_in_either_form(times: str) -> None:
    o = parse(startingOffsetsByTimestamp=times)
    assert by_split(o.starting.split_timestamps) == {"east/orders/0": 1000, "east/orders/2": 2000}
    assert o.starting.no_match == Position.NO_MATCH_ERROR
    assert o.starting.kind == Position.LATEST  # the others: startingOffsets (default latest)


def test_unnamed_splits_follow_starting_offsets_or_timestamp() -> None:
    o = parse(startingOffsetsByTimestamp='{"e/t/0": 5}', startingOffsets="earliest")
    assert o.starting.kind == Position.EARLIEST
    o = parse(startingOffsetsByTimestamp='{"e/t/0": 5}', startingTimestamp="7")
    assert (o.starting.kind, o.starting.timestamp_ms) == (Position.TIMESTAMP, 7)
    o = parse(startingOffsetsByTimestamp='{"e/t/0": 5}', startingOffsets='{"e/t/1": 3}')
    assert by_split(o.starting.offsets) == {"e/t/1": 3}
    assert by_split(o.starting.split_timestamps) == {"e/t/0": 5}


def test_latest_strategy() -> None:
    o = parse(
        startingOffsetsByTimestamp='{"e/t/0": 5}', startingOffsetsByTimestampStrategy="LATEST"
    )
    assert o.starting.no_match == Position.NO_MATCH_LATEST


@pytest.mark.parametrize(
    ("options", "field", "says"),
    [
        (
            {"startingOffsetsByTimestampStrategy": "latest"},
            "option startingoffsetsbytimestampstrategy",
            "only with startingOffsetsByTimestamp",
        ),
        (
            {
                "startingOffsetsByTimestamp": '{"e/t/0": 5}',
                "startingOffsetsByTimestampStrategy": "x",
            },
            "option startingoffsetsbytimestampstrategy",
            "error or latest",
        ),
        ({"startingOffsetsByTimestamp": "{}"}, "option startingoffsetsbytimestamp", "no split"),
        ({"startingOffsetsByTimestamp": "[1]"}, "option startingoffsetsbytimestamp", "JSON object"),
        ({"startingOffsetsByTimestamp": '{"e/t/0": -1}'}, "option startingoffsetsbytimestamp", ""),
        (
            {"startingOffsetsByTimestamp": '{"e/t/0": 5}', "startingOffsets": '{"e/t/0": 3}'},
            "option startingoffsetsbytimestamp.e/t/0",
            "also named in startingOffsets",
        ),
    ],
)
def test_bad_split_times_are_refused(options: dict[str, str], field: str, says: str) -> None:
    err = refused(**options)
    assert err.field.startswith(field)
    assert says in err.problem


def test_ending_by_timestamp_is_batch_only_and_ends_at_latest_without_a_match() -> None:
    err = refused(endingOffsetsByTimestamp='{"e/t/0": 5}')
    assert "only batch queries" in err.problem
    o = parse(streaming=False, endingOffsetsByTimestamp='{"e/t/0": 5}')
    assert by_split(o.ending.split_timestamps) == {"e/t/0": 5}
    assert o.ending.no_match == Position.NO_MATCH_LATEST
    assert o.ending.kind == Position.LATEST
    assert (
        "unknown option"
        in refused(
            streaming=False,
            endingOffsetsByTimestamp='{"e/t/0": 5}',
            endingOffsetsByTimestampStrategy="error",
        ).problem
    )


# -- kafka.* ------------------------------------------------------------------------


def test_kafka_options_become_reader_overrides_hidden_in_repr() -> None:
    o = parse(**{"kafka.fetch.max.bytes": "2097152", "KAFKA.client.rack": "rack-secret-7"})
    assert o.kafka.as_librdkafka_dict() == {
        "fetch.max.bytes": "2097152",
        "client.rack": "rack-secret-7",
    }
    assert "rack-secret-7" not in repr(o)
    assert "rack-secret-7" not in repr(o.kafka)
    assert "client.rack" in repr(o.kafka)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("group.id", "commitGroupId"),
        ("group.instance.id", "never join a group"),
        ("enable.auto.commit", "never commit"),
        ("enable.auto.offset.store", "never commit"),
        ("auto.offset.reset", "failOnDataLoss"),
        ("bootstrap.servers", "stream document"),
        ("security.protocol", "never from query options"),
        ("sasl.password", "never from query options"),
        ("sasl.mechanism", "never from query options"),
        ("ssl.ca.location", "never from query options"),
        ("max.poll.records", "no per-poll record limit"),
        ("fetch.max.wait.ms", "kafka.fetch.wait.max.ms"),
        ("value.deserializer", "valueFormat"),
        ("fetch.max.byte", "No such configuration property"),
    ],
)
def test_kafka_options_multikafka_owns_or_librdkafka_lacks_are_refused(key: str, says: str) -> None:
    err = refused(**{f"kafka.{key}": "hunter2"})
    assert err.field == f"option kafka.{key}"
    assert says in err.problem
    assert "hunter2" not in str(err)


def test_a_value_librdkafka_refuses_is_named_without_the_value() -> None:
    err = refused(**{"kafka.isolation.level": "read_sometimes"})
    assert err.field == "option kafka.isolation.level"
    assert "Invalid value" in err.problem
    assert "read_sometimes" not in str(err)
    err = refused(**{"kafka.fetch.max.bytes": "10"})  # below message.max.bytes
    assert "message.max.bytes" in err.problem


def test_unknown_options_still_list_the_known_ones() -> None:
    err = refused(minOffsetPerTrigger="5")
    assert "unknown option" in err.problem
    for name in (
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "startingoffsetsbytimestamp",
        "kafka.*",
    ):
        assert name in err.problem
        assert KNOWN[name]


def test_overrides_win_over_the_stream_documents_properties() -> None:
    conn = Connection("east", "h:1", Properties({"fetch.wait.max.ms": "10", "sasl.password": "pw"}))
    merged = with_overrides(
        conn, check_overrides({"fetch.wait.max.ms": "500", "client.rack": "r1"})
    )
    config = client_config(merged, {"fetch.wait.max.ms": "100"})
    assert config["fetch.wait.max.ms"] == "500"
    assert config["client.rack"] == "r1"
    assert config["sasl.password"] == "pw"
    assert config["bootstrap.servers"] == "h:1"
    assert "pw" not in repr(merged)
    assert "r1" not in repr(merged)
    assert merged.fingerprint != conn.fingerprint
    assert with_overrides(conn, Overrides()) is conn


def test_a_range_consumer_gets_the_overrides() -> None:
    conn = Connection("east", "127.0.0.1:1", Properties({}))
    merged = with_overrides(conn, check_overrides({"fetch.wait.max.ms": "777"}))
    reader = KafkaRangeConsumer(merged)
    try:
        assert reader.connection.properties["fetch.wait.max.ms"] == "777"
    finally:
        reader.close()


# -- the agent: one consumer per (stream, cluster, overrides) ------------------------


def task(overrides: Overrides, conn: Connection) -> ReadTask:
    return ReadTask(
        coordinator=None,
        stream="orders",
        query_id="q",
        generation=1,
        ranges=(SplitRange("east", "t", 0, 0, 3),),
        clusters={"east": conn},
        overrides=overrides,
    )


def test_queries_with_different_overrides_get_consumers_of_their_own() -> None:
    factory = FakeFactory()
    agent = ReaderAgent(factory=factory, idle_timeout_s=3600)
    conn = Connection("east", "h:1", Properties({"fetch.wait.max.ms": "10"}))
    small = check_overrides({"fetch.max.bytes": "1048576"})
    try:
        for overrides in (Overrides(), small, Overrides(), small):
            assert sum(b.num_rows for b in agent.read(task(overrides, conn))) == 3
        assert len(factory.made) == 2  # reused, never restarted by each other
        plain, tuned = factory.made
        assert "fetch.max.bytes" not in plain.connection.properties
        assert tuned.connection.properties["fetch.max.bytes"] == "1048576"
        assert tuned.connection.properties["fetch.wait.max.ms"] == "10"
        assert agent.sub_readers() == [("orders", "east")]
        assert len(agent.slots()) == 2
        # A reconcile that changes the cluster's connection restarts both.
        agent.apply(
            reader_pb2.ReconcileEvent(
                generation=2,
                clusters=[
                    reader_pb2.ClusterDesired(
                        stream="orders", cluster="east", state="ACTIVE", fingerprint="changed"
                    )
                ],
            )
        )
        assert plain.closes == 1
        assert tuned.closes == 1
        assert agent.slots() == []
    finally:
        agent.close()
