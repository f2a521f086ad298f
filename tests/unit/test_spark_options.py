"""Options of the ``multikafka`` Spark source (multikafka.spark._options.parse_options into ReadOptions)."""

from __future__ import annotations

from typing import Any

import pytest

from multikafka.core.exceptions import ValidationError
from multikafka.reader_agent import SPARK_DDL, ReadOptions
from multikafka.reader_agent._payloads import Mode, PayloadDecoding
from multikafka.spark import MultiKafkaDataSource
from multikafka.spark._options import KNOWN, parse_options
from multikafka.v1.planner_pb2 import Position
from tests.helpers import by_split

INTERNALS = (
    "multikafka.reader_agent._payloads",
    "multikafka.spark._options",
)


BASE = {"coordinator": "127.0.0.1:7070", "stream": "orders"}


def parse(streaming: bool = True, **options: str) -> ReadOptions:
    return parse_options({**BASE, **options}, streaming=streaming)


def refused(options: dict[str, str], *, streaming: bool = True) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_options(options, streaming=streaming)
    return info.value


def test_required_only() -> None:
    o = parse()
    assert o.coordinator == "127.0.0.1:7070"
    assert o.stream == "orders"


@pytest.mark.parametrize("missing", ["coordinator", "stream"])
def test_required_options(missing: str) -> None:
    options = {k: v for k, v in BASE.items() if k != missing}
    err = refused(options)
    assert err.field == f"option {missing}"
    assert "required" in err.problem


@pytest.mark.parametrize("missing", ["coordinator", "stream"])
def test_blank_required_options(missing: str) -> None:
    err = refused({**BASE, missing: "  "})
    assert err.field == f"option {missing}"
    assert "required" in err.problem


def test_coordinator_must_be_host_port() -> None:
    err = refused({**BASE, "coordinator": "localhost"})
    assert err.field == "option coordinator"
    assert "'localhost'" in err.problem


def test_streaming_defaults() -> None:
    o = parse(streaming=True)
    assert o.starting == Position(kind=Position.LATEST)
    assert o.ending == Position(kind=Position.LATEST)
    assert o.max_records_per_batch is None
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.min_partitions == 1
    assert o.max_records_per_partition == 2**62  # no limit, as in Spark's Kafka source
    assert o.query_id == ""
    assert o.commit_group_id == ""
    assert o.coordinator_timeout_s == 60.0
    assert o.tls_ca == ""


def test_batch_defaults() -> None:
    o = parse(streaming=False)
    assert o.starting == Position(kind=Position.EARLIEST)
    assert o.ending == Position(kind=Position.LATEST)


@pytest.mark.parametrize("key", ["startingOffsets", "STARTINGOFFSETS", "startingoffsets"])
def test_keys_are_case_insensitive(key: str) -> None:
    assert parse(**{key: "earliest"}).starting.kind == Position.EARLIEST


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("earliest", Position.EARLIEST),
        ("LATEST", Position.LATEST),
        (" Earliest ", Position.EARLIEST),
    ],
)
def test_named_starting_positions(value: str, kind: int) -> None:
    assert parse(startingOffsets=value).starting == Position(kind=kind)


def test_json_starting_offsets() -> None:
    o = parse(startingOffsets='{"east/orders/0": 42, "west/orders/1": -2, "west/orders/2": -1}')
    assert o.starting.kind == Position.SPECIFIC
    assert by_split(o.starting.offsets) == {
        "east/orders/0": 42,
        "west/orders/1": -2,
        "west/orders/2": -1,
    }
    assert o.starting.fallback == Position.EARLIEST


def test_json_ending_offsets_fall_back_to_latest() -> None:
    o = parse(streaming=False, endingOffsets='{"east/orders/0": 42}')
    assert o.ending.kind == Position.SPECIFIC
    assert by_split(o.ending.offsets) == {"east/orders/0": 42}
    assert o.ending.fallback == Position.LATEST


@pytest.mark.parametrize("value", ['{"east/orders/0": 4', "{oops}"])
def test_invalid_json_names_the_option(value: str) -> None:
    err = refused({**BASE, "startingOffsets": value})
    assert err.field == "option startingoffsets"
    assert "not valid JSON" in err.problem


@pytest.mark.parametrize("split", ["east/orders", "east//0", "east/orders/x", "east/orders/-1"])
def test_bad_split_id_names_the_option(split: str) -> None:
    err = refused({**BASE, "startingOffsets": f'{{"{split}": 1}}'})
    assert err.field == f"option startingoffsets.{split}"


def test_bad_offset_names_the_option() -> None:
    err = refused({**BASE, "startingOffsets": '{"east/orders/0": -3}'})
    assert err.field == "option startingoffsets.east/orders/0"


def test_json_naming_no_split_is_refused() -> None:
    err = refused({**BASE, "startingOffsets": "{}"})
    assert err.field == "option startingoffsets"
    assert "no split" in err.problem


@pytest.mark.parametrize("value", ["middle", "42", "[1]", ""])
def test_unknown_starting_value(value: str) -> None:
    err = refused({**BASE, "startingOffsets": value})
    assert err.field == "option startingoffsets"
    assert "earliest, latest or JSON" in err.problem


def test_starting_timestamp() -> None:
    o = parse(startingTimestamp="1700000000000")
    assert o.starting == Position(kind=Position.TIMESTAMP, timestamp_ms=1_700_000_000_000)


def test_starting_timestamp_wins_over_offsets() -> None:
    o = parse(startingTimestamp="5", startingOffsets="earliest")
    assert o.starting.kind == Position.TIMESTAMP


@pytest.mark.parametrize("value", ["-1", "soon", "1.5"])
def test_bad_starting_timestamp(value: str) -> None:
    err = refused({**BASE, "startingTimestamp": value})
    assert err.field == "option startingtimestamp"


def test_ending_timestamp_for_batch() -> None:
    o = parse(streaming=False, endingTimestamp="99")
    assert o.ending == Position(kind=Position.TIMESTAMP, timestamp_ms=99)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"endingOffsets": "latest"}, "option endingoffsets"),
        ({"endingOffsets": '{"a/t/0": 1}'}, "option endingoffsets"),
        ({"endingTimestamp": "5"}, "option endingtimestamp"),
    ],
)
def test_ending_refused_for_streaming(options: dict[str, str], field: str) -> None:
    err = refused({**BASE, **options}, streaming=True)
    assert err.field.lower() == field
    assert "batch" in err.problem


def test_earliest_is_not_an_end() -> None:
    err = refused({**BASE, "endingOffsets": "earliest"}, streaming=False)
    assert err.field == "option endingoffsets"
    assert "earliest is not a valid end" in err.problem


def test_earliest_in_json_is_not_an_end() -> None:
    err = refused({**BASE, "endingOffsets": '{"east/orders/0": -2}'}, streaming=False)
    assert err.field.startswith("option endingoffsets")


def test_ending_latest_for_batch() -> None:
    assert parse(streaming=False, endingOffsets="latest").ending == Position(kind=Position.LATEST)


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("500", 500), (" 7 ", 7)])
def test_max_offsets_per_trigger(value: str, expected: int) -> None:
    assert parse(maxOffsetsPerTrigger=value).max_records_per_batch == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [("0", "at least 1"), ("-5", "at least 1"), ("1.5", "whole number"), ("lots", "whole number")],
)
def test_bad_max_offsets_per_trigger(value: str, problem: str) -> None:
    err = refused({**BASE, "maxOffsetsPerTrigger": value})
    assert err.field == "option maxoffsetspertrigger"
    assert problem in err.problem
    assert value.strip() in err.problem


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("FALSE", False), (" True ", True)]
)
def test_fail_on_data_loss(value: str, expected: bool) -> None:
    assert parse(failOnDataLoss=value).fail_on_data_loss is expected


@pytest.mark.parametrize("value", ["yes", "0", "1", ""])
def test_bad_fail_on_data_loss(value: str) -> None:
    err = refused({**BASE, "failOnDataLoss": value})
    assert err.field == "option failondataloss"
    assert "true or false" in err.problem


def test_other_options() -> None:
    o = parse(
        includeHeaders="true",
        minPartitions="8",
        maxRecordsPerPartition="5000",
        queryId="q-1",
        commitGroupId="grp",
        coordinatorTimeoutMs="2500",
        coordinatorTlsCa="/etc/ca.pem",
    )
    assert o.include_headers is True
    assert o.min_partitions == 8
    assert o.max_records_per_partition == 5000
    assert o.query_id == "q-1"
    assert o.commit_group_id == "grp"
    assert o.coordinator_timeout_s == 2.5
    assert o.tls_ca == "/etc/ca.pem"


@pytest.mark.parametrize("key", ["minPartitions", "maxRecordsPerPartition"])
def test_partition_options_must_be_positive(key: str) -> None:
    err = refused({**BASE, key: "0"})
    assert err.field == f"option {key.lower()}"


def test_coordinator_timeout_may_be_zero() -> None:
    assert parse(coordinatorTimeoutMs="0").coordinator_timeout_s == 0.0


def test_unknown_option_is_refused_with_the_known_ones() -> None:
    err = refused({**BASE, "startingOffset": "earliest"})
    assert err.field == "option startingoffset"
    assert "unknown option" in err.problem
    for key in KNOWN:
        if key != "path":
            assert key in err.problem
    assert "path" not in err.problem


def test_path_is_ignored() -> None:
    assert parse(path="/some/where") == parse()


def test_non_string_values_are_accepted() -> None:
    options: dict[str, Any] = {**BASE, "maxOffsetsPerTrigger": 10, "includeHeaders": True}
    o = parse_options(options, streaming=True)
    assert o.max_records_per_batch == 10
    assert o.include_headers is True


def test_options_are_frozen() -> None:
    o = parse()
    with pytest.raises(AttributeError):
        o.stream = "other"  # type: ignore[misc]


def test_register_carries_the_session_parallelism_to_the_python_workers() -> None:
    """Python workers cannot ask Spark for its parallelism: the class
    registered carries it, and Spark pickles that class by value."""
    from types import SimpleNamespace

    from pyspark import cloudpickle

    import multikafka.spark

    registered: list[type] = []
    spark = SimpleNamespace(
        sparkContext=SimpleNamespace(defaultParallelism=7),
        dataSource=SimpleNamespace(register=registered.append),
    )
    cls = multikafka.spark.register(spark)  # type: ignore[arg-type]
    assert registered == [cls]
    assert cls.name() == "multikafka"
    shipped = cloudpickle.loads(cloudpickle.dumps(cls))
    assert shipped.default_parallelism == 7
    reader = shipped({"coordinator": "127.0.0.1:1", "stream": "s"}).streamReader(None)
    assert reader.options.parallelism == 7
    assert multikafka.spark.MultiKafkaDataSource.default_parallelism == 0


# -- decoding: keyFormat, valueFormat, their schemas, mode -------------------------


def test_decoding_defaults_to_raw_bytes() -> None:
    o = parse()
    assert o.decoding == PayloadDecoding()
    assert o.decoding.is_raw
    assert o.decoding.mode is Mode.PERMISSIVE


def test_decoding_options_in_any_case() -> None:
    o = parse(
        valueFormat="JSON",
        VALUESCHEMA="id long, tags array<string>",
        keyformat="string",
        Mode="dropMalformed",
    )
    assert o.decoding == PayloadDecoding(
        key_format="string",
        value_format="json",
        value_schema="id long, tags array<string>",
        mode=Mode.DROPMALFORMED,
    )


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        (
            {"valueFormat": "avro"},
            "option valueFormat",
            ["unknown format 'avro'", "json, raw, string"],
        ),
        ({"keyFormat": "json"}, "option keySchema", ["keyFormat json needs a schema"]),
        (
            {"valueFormat": "json", "valueSchema": "id lng"},
            "option valueSchema",
            ["position 3", "'lng'"],
        ),
        ({"valueSchema": "id long"}, "option valueSchema", ["only json takes a schema", "raw"]),
        (
            {"keyFormat": "string", "keySchema": "a int"},
            "option keySchema",
            ["keyFormat is string"],
        ),
        ({"mode": "lenient"}, "option mode", ["PERMISSIVE, DROPMALFORMED, FAILFAST", "'lenient'"]),
    ],
)
def test_bad_decoding_options_say_what_to_fix(
    options: dict[str, str], field: str, words: list[str]
) -> None:
    err = refused({**BASE, **options})
    assert err.field == field
    for word in words:
        assert word in err.problem, err.problem


@pytest.mark.parametrize("key", ["keyFormat", "keySchema", "valueFormat", "valueSchema", "mode"])
def test_decoding_options_are_known(key: str) -> None:
    assert key.lower() in KNOWN


def test_declared_schema_follows_the_decoding_options() -> None:
    source = MultiKafkaDataSource(
        {**BASE, "valueFormat": "json", "valueSchema": "id long", "includeHeaders": "true"}
    )
    ddl = source.schema()
    assert ddl.startswith("key binary, value struct<`id`: bigint>, topic string, ")
    assert ddl.endswith(
        ", headers array<struct<`key`: string, `value`: binary>>, cluster string, _corrupt_value binary"
    )
    assert MultiKafkaDataSource(dict(BASE)).schema() == SPARK_DDL


def test_declared_schema_refuses_bad_decoding_options() -> None:
    with pytest.raises(ValidationError, match="option valueSchema"):
        MultiKafkaDataSource({**BASE, "valueFormat": "json"}).schema()


class _ConnectSession:
    """What a Spark Connect session offers ``register``: no SparkContext
    (``JVM_ATTRIBUTE_NOT_SUPPORTED``), a configuration, and registration."""

    def __init__(self, conf: dict[str, str]) -> None:
        from types import SimpleNamespace

        self._conf = conf
        self.registered: list[type] = []
        self.conf = SimpleNamespace(get=lambda key, default=None: self._conf.get(key, default))
        self.dataSource = SimpleNamespace(register=self.registered.append)

    @property
    def sparkContext(self) -> object:
        from pyspark.errors import PySparkAttributeError

        raise PySparkAttributeError(
            errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED",
            messageParameters={"attr_name": "sparkContext"},
        )


@pytest.mark.parametrize(
    ("conf", "parallelism"),
    [
        ({"spark.master": "local[3]"}, 3),
        ({"spark.master": "local[4,2]"}, 4),
        ({"spark.master": "local[*]"}, 0),
        ({"spark.master": "spark://m:7077", "spark.default.parallelism": "12"}, 12),
        (
            {
                "spark.master": "k8s://x",
                "spark.executor.instances": "5",
                "spark.executor.cores": "4",
            },
            20,
        ),
        ({"spark.master": "yarn"}, 0),
    ],
)
def test_register_works_over_spark_connect(conf: dict[str, str], parallelism: int) -> None:
    """A Connect session has no SparkContext: ``register`` reads the
    parallelism from the configuration, or does without it (0)."""
    import multikafka.spark

    spark = _ConnectSession(conf)
    cls = multikafka.spark.register(spark)  # type: ignore[arg-type]
    assert spark.registered == [cls]
    assert cls.default_parallelism == parallelism


def test_pyspark_finds_the_source_without_code() -> None:
    """PySpark's own discovery: a top-level ``pyspark_*`` module with a
    ``DefaultSource`` (``pyspark/sql/worker/lookup_data_sources.py``)."""
    from importlib import import_module
    from pkgutil import iter_modules

    from pyspark.sql.datasource import DataSource

    from multikafka.spark import MultiKafkaDataSource

    found = [m.name for m in iter_modules() if m.name.startswith("pyspark_")]
    assert "pyspark_multikafka" in found
    source = import_module("pyspark_multikafka").DefaultSource
    assert issubclass(source, DataSource)
    assert source is MultiKafkaDataSource
    assert source.name() == "multikafka"
