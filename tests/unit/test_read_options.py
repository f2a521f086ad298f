"""One read-options model (multikafka.reader_agent._options.ReadOptions) that the
Spark source's options and the standalone reader's arguments both map onto.

The mapping is locked: every field is set by a Spark option and by a Reader
argument, or is listed by that face, with the reason, as not its to set;
equal settings give equal ReadOptions; a check both faces share refuses in
each face's own words. Also: the model checks itself when made directly,
pickles, hides secrets, and its tasks carry what it asks."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from multikafka import Reader
from multikafka.core import env
from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import Connection
from multikafka.core.planner_client import Plan
from multikafka.core.transport import ConnectConfig
from multikafka.reader import NAMES as READER_NAMES
from multikafka.reader_agent._options import ReadOptions, Vocabulary
from multikafka.reader_agent._overrides import check_overrides
from multikafka.reader_agent._payloads import Mode, PayloadDecoding
from multikafka.reader_agent._plan import read_tasks, tasks_from_plan
from multikafka.spark import parse_options
from multikafka.spark._options import NAMES as SPARK_NAMES
from multikafka.v1.planner_pb2 import Position
from tests.helpers import by_split

INTERNALS = (
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._options",
    "multikafka.reader_agent._overrides",
    "multikafka.reader_agent._payloads",
    "multikafka.reader_agent._plan",
    "multikafka.spark._options",
)


COORDINATOR = "127.0.0.1:7070"
STREAM = "orders"
FIELDS = [f.name for f in dataclasses.fields(ReadOptions)]
DEFAULT = ReadOptions(stream=STREAM, coordinator=COORDINATOR)


@pytest.fixture(autouse=True)
def _no_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (env.READER_TOKEN, env.READER_TOKEN_FILE, env.TLS_CA):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """PEM files and a token file the Reader reads when it is made."""
    out = {}
    for name, text in (
        ("ca", "CA PEM"),
        ("cert", "CERT PEM"),
        ("key", "KEY PEM"),
        ("token", "t0k"),
    ):
        path = tmp_path / name
        path.write_text(text)
        out[name] = str(path)
    return out


def spark(options: Mapping[str, Any], *, streaming: bool = True) -> ReadOptions:
    """What a Spark query with ``options`` reads with, planned for one task
    at a time (as a Reader is)."""
    return parse_options(
        {"coordinator": COORDINATOR, "stream": STREAM, **options},
        streaming=streaming,
        parallelism=1,
    )


def reader(arguments: Mapping[str, Any]) -> ReadOptions:
    """What a Reader made with ``arguments`` reads with."""
    args = dict(arguments)
    r = Reader(args.pop("coordinator", COORDINATOR), args.pop("stream", STREAM), **args)
    r.close()
    return r.options


def _fill(value: Any, files: Mapping[str, str]) -> Any:
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return files[value[1:-1]]
    return value


def filled(settings: Mapping[str, Any], files: Mapping[str, str]) -> dict[str, Any]:
    return {k: _fill(v, files) for k, v in settings.items()}


# -- the mapping --------------------------------------------------------------------

#: (field, Spark options, Reader arguments) setting it to something not the
#: default; "<ca>" and the like are files of the ``files`` fixture.
BOTH: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("stream", {"stream": "payments"}, {"stream": "payments"}),
    (
        "coordinator",
        {"coordinator": "10.0.0.1:7070,10.0.0.2:7070"},
        {"coordinator": "10.0.0.1:7070,10.0.0.2:7070"},
    ),
    ("tls_ca", {"coordinatorTlsCa": "<ca>"}, {"tls_ca": "<ca>"}),
    (
        "tls_cert",
        {"coordinatorTlsCert": "<cert>", "coordinatorTlsKey": "<key>"},
        {"tls_cert": "<cert>", "tls_key": "<key>"},
    ),
    (
        "tls_key",
        {"coordinatorTlsCert": "<cert>", "coordinatorTlsKey": "<key>"},
        {"tls_cert": "<cert>", "tls_key": "<key>"},
    ),
    ("token_file", {"coordinatorTokenFile": "<token>"}, {"token_file": "<token>"}),
    ("coordinator_timeout_s", {"coordinatorTimeoutMs": "2500"}, {"coordinator_timeout_s": 2.5}),
    ("starting", {"startingOffsets": "earliest"}, {"starting_offsets": "earliest"}),
    (
        "starting",
        {"startingOffsets": '{"east/t/0": 42, "east/t/1": -1}'},
        {"starting_offsets": '{"east/t/0": 42, "east/t/1": -1}'},
    ),
    (
        "starting",
        {"startingTimestamp": "1700000000000"},
        {"starting_timestamp_ms": 1_700_000_000_000},
    ),
    (
        "starting",
        {
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"east": {"t": {"0": 1000}}}',
            "startingOffsetsByTimestampStrategy": "latest",
        },
        {
            "starting_offsets": "earliest",
            "starting_offsets_by_timestamp": {"east": {"t": {"0": 1000}}},
            "starting_offsets_by_timestamp_strategy": "latest",
        },
    ),
    ("max_records_per_batch", {"maxOffsetsPerTrigger": "100"}, {"max_records_per_batch": 100}),
    ("min_records_per_batch", {"minOffsetsPerTrigger": "10"}, {"min_records_per_batch": 10}),
    (
        "max_batch_delay_s",
        {"minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s"},
        {"min_records_per_batch": 10, "max_batch_delay_s": 30.0},
    ),
    ("fail_on_data_loss", {"failOnDataLoss": "false"}, {"fail_on_data_loss": False}),
    ("include_headers", {"includeHeaders": "true"}, {"include_headers": True}),
    ("query_id", {"queryId": "q-1"}, {"query_id": "q-1"}),
    ("commit_group_id", {"commitGroupId": "lag"}, {"commit_group_id": "lag"}),
    (
        "decoding",
        {
            "keyFormat": "string",
            "valueFormat": "json",
            "valueSchema": "id long",
            "mode": "FAILFAST",
        },
        {
            "key_format": "string",
            "value_format": "json",
            "value_schema": "id long",
            "mode": "FAILFAST",
        },
    ),
    ("kafka", {"kafka.fetch.max.bytes": "2097152"}, {"kafka": {"fetch.max.bytes": "2097152"}}),
]
#: (field, Spark options, streaming) for the fields only Spark sets.
SPARK_ONLY: list[tuple[str, dict[str, str], bool]] = [
    ("ending", {"endingOffsets": '{"east/t/0": 9}'}, False),
    ("ending", {"endingTimestamp": "99"}, False),
    ("min_partitions", {"minPartitions": "8"}, True),
    ("max_records_per_partition", {"maxRecordsPerPartition": "5000"}, True),
]
#: (field, Reader arguments) for the fields only the Reader sets.
READER_ONLY: list[tuple[str, dict[str, Any]]] = [
    ("resume_at", {"starting_offsets": {"east": {"t": [3, 4]}}}),
]
#: Fields neither face's user sets: each face sets them itself.
NEITHER = {"parallelism"}


@pytest.mark.parametrize("names", [SPARK_NAMES, READER_NAMES], ids=["spark", "reader"])
def test_every_field_is_named_by_each_face_or_said_why_not(names: Vocabulary) -> None:
    assert set(names.written).isdisjoint(names.absent)
    assert set(names.written) | set(names.absent) == set(FIELDS)
    assert all(why.strip() for why in names.absent.values())
    assert set(names.labels) <= set(names.written)


def test_the_cases_below_cover_the_mapping() -> None:
    spark_names, reader_names = set(SPARK_NAMES.written), set(READER_NAMES.written)
    assert {f for f, _, _ in BOTH} == spark_names & reader_names
    assert {f for f, _, _ in SPARK_ONLY} == spark_names - reader_names
    assert {f for f, _ in READER_ONLY} == reader_names - spark_names
    assert set(SPARK_NAMES.absent) & set(READER_NAMES.absent) == NEITHER


@pytest.mark.parametrize(
    ("field", "options", "arguments"), BOTH, ids=[f"{c[0]}-{i}" for i, c in enumerate(BOTH)]
)
def test_both_faces_set_each_field_alike(
    field: str, options: dict[str, Any], arguments: dict[str, Any], files: dict[str, str]
) -> None:
    from_spark = spark(filled(options, files))
    from_reader = reader(filled(arguments, files))
    assert from_spark == from_reader
    assert getattr(from_spark, field) != getattr(DEFAULT, field)


def test_both_faces_default_alike() -> None:
    assert spark({}) == reader({})
    assert dataclasses.replace(spark({}), parallelism=0) == DEFAULT


@pytest.mark.parametrize(("field", "options", "streaming"), SPARK_ONLY)
def test_spark_only_fields(field: str, options: dict[str, str], streaming: bool) -> None:
    got = spark(options, streaming=streaming)
    assert getattr(got, field) != getattr(DEFAULT, field)
    assert field in READER_NAMES.absent


@pytest.mark.parametrize(("field", "arguments"), READER_ONLY)
def test_reader_only_fields(field: str, arguments: dict[str, Any]) -> None:
    got = reader(arguments)
    assert getattr(got, field) != getattr(DEFAULT, field)
    assert field in SPARK_NAMES.absent


def test_a_saved_position_is_resumed_not_resolved() -> None:
    got = reader({"starting_offsets": {"east": {"t": [3, 4]}, "west/t/0": 7}})
    assert got.resume_at == {"east/t/0": 3, "east/t/1": 4, "west/t/0": 7}
    assert got.starting == DEFAULT.starting
    # A time wins over a saved position, as before.
    timed = reader({"starting_offsets": {"east/t/0": 3}, "starting_timestamp_ms": 5})
    assert timed.resume_at is None
    assert (timed.starting.kind, timed.starting.timestamp_ms) == (Position.TIMESTAMP, 5)


def test_each_face_sets_the_parallelism_itself() -> None:
    assert reader({}).parallelism == 1
    assert (
        parse_options({"coordinator": COORDINATOR, "stream": STREAM}, streaming=True).parallelism
        == 0
    )
    assert (
        parse_options(
            {"coordinator": COORDINATOR, "stream": STREAM}, streaming=True, parallelism=7
        ).parallelism
        == 7
    )


def test_standalone_reader_takes_the_same_settings() -> None:
    o = reader(
        {
            "starting_offsets": "earliest",
            "starting_offsets_by_timestamp": {"east": {"t": {"0": 1000}}},
            "starting_offsets_by_timestamp_strategy": "latest",
            "min_records_per_batch": 10,
            "max_batch_delay_s": 5,
            "kafka": {"fetch.max.bytes": "2097152"},
        }
    )
    assert o.starting.kind == Position.EARLIEST
    assert by_split(o.starting.split_timestamps) == {"east/t/0": 1000}
    assert o.starting.no_match == Position.NO_MATCH_LATEST
    gate = o.min_records_gate()
    assert gate is not None
    assert (gate.min_records, gate.max_delay_s) == (10, 5)
    assert o.kafka.as_librdkafka_dict() == {"fetch.max.bytes": "2097152"}


# -- the checks both faces share: one place, each face's words ----------------------------

#: (field, Spark options, Reader arguments, the problem with {name} for the
#: face's name of the field it mentions).
SHARED_CHECKS: list[tuple[str, dict[str, str], dict[str, Any], str]] = [
    (
        "max_records_per_batch",
        {"maxOffsetsPerTrigger": "0"},
        {"max_records_per_batch": 0},
        "must be at least 1, got 0",
    ),
    (
        "min_records_per_batch",
        {"minOffsetsPerTrigger": "-3"},
        {"min_records_per_batch": -3},
        "must be at least 1, got -3",
    ),
    (
        "min_records_per_batch",
        {"minOffsetsPerTrigger": "11", "maxOffsetsPerTrigger": "10"},
        {"min_records_per_batch": 11, "max_records_per_batch": 10},
        "11 is above {max_records_per_batch} (10): the minimum must not exceed the maximum",
    ),
    (
        "coordinator",
        {"coordinator": "localhost"},
        {"coordinator": "localhost"},
        "'localhost' is not host:port",
    ),
    (
        "coordinator",
        {"coordinator": "h:1,h:99999"},
        {"coordinator": "h:1,h:99999"},
        "'h:99999' is not host:port",
    ),
]


@pytest.mark.parametrize(("field", "options", "arguments", "problem"), SHARED_CHECKS)
def test_a_shared_check_refuses_in_each_faces_words(
    field: str, options: dict[str, str], arguments: dict[str, Any], problem: str
) -> None:
    for names, make in (
        (SPARK_NAMES, lambda: spark(options)),
        (READER_NAMES, lambda: reader(arguments)),
    ):
        with pytest.raises(ValidationError) as info:
            make()
        assert info.value.field == names.label(field)
        assert info.value.problem == problem.format(
            max_records_per_batch=names.name("max_records_per_batch")
        )


def test_the_faces_words() -> None:
    assert SPARK_NAMES.label("min_records_per_batch") == "option minoffsetspertrigger"
    assert SPARK_NAMES.name("max_records_per_batch") == "maxOffsetsPerTrigger"
    assert SPARK_NAMES.label("token_file") == "option coordinatorTokenFile"
    assert READER_NAMES.label("min_records_per_batch") == "min_records_per_batch"
    assert READER_NAMES.label("kafka") == "kafka"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_records_per_batch": 0}, "min_records_per_batch"),
        ({"min_records_per_batch": 11, "max_records_per_batch": 10}, "min_records_per_batch"),
        ({"min_records_per_batch": 1, "max_batch_delay_s": -1}, "max_batch_delay_s"),
        ({"max_batch_delay_s": -1}, "max_batch_delay_s"),
        ({"kafka": {"group.id": "g"}}, "kafka.group.id"),
        ({"starting_offsets_by_timestamp": "{}"}, "starting_offsets_by_timestamp"),
        (
            {
                "starting_offsets_by_timestamp": {"e/t/0": 1},
                "starting_offsets_by_timestamp_strategy": "no",
            },
            "starting_offsets_by_timestamp_strategy",
        ),
        (
            {"starting_offsets": {"e/t/0": 4}, "starting_offsets_by_timestamp": {"e/t/0": 1}},
            "starting_offsets_by_timestamp",
        ),
        ({"poll_interval_s": 0}, "poll_interval_s"),
        ({"stream": ""}, "stream"),
    ],
)
def test_standalone_reader_refuses_bad_settings(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        reader(kwargs)
    assert info.value.field == field


def test_an_unreadable_token_file_is_named_by_each_face(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-token")
    with pytest.raises(ValidationError) as info:
        spark({"coordinatorTokenFile": missing}).connect_config(SPARK_NAMES)
    assert info.value.field == "option coordinatorTokenFile"
    with pytest.raises(ValidationError) as info:
        reader({"token_file": missing})
    assert info.value.field == "token_file"


# -- the model itself ---------------------------------------------------------------------


def test_made_directly_it_is_checked_in_its_own_words() -> None:
    with pytest.raises(ValidationError) as info:
        ReadOptions(STREAM, COORDINATOR, min_records_per_batch=5, max_records_per_batch=4)
    assert info.value.field == "min_records_per_batch"
    assert "above max_records_per_batch (4)" in info.value.problem
    for bad, field in (
        ({"stream": ""}, "stream"),
        ({"coordinator": "nowhere"}, "coordinator"),
        ({"max_batch_delay_s": -0.5}, "max_batch_delay_s"),
        ({"min_partitions": 0}, "min_partitions"),
        ({"max_records_per_partition": 0}, "max_records_per_partition"),
        ({"parallelism": -1}, "parallelism"),
    ):
        with pytest.raises(ValidationError) as info:
            dataclasses.replace(DEFAULT, **bad)
        assert info.value.field == field


def test_it_is_frozen_pickles_and_hides_the_kafka_values() -> None:
    o = spark({"kafka.client.rack": "rack-secret-7", "minOffsetsPerTrigger": "3"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.stream = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(o)) == o
    assert "rack-secret-7" not in repr(o)
    assert "names" not in repr(o)


def test_connect_config_reads_the_files_now(files: dict[str, str]) -> None:
    o = dataclasses.replace(
        DEFAULT,
        coordinator="a:1,b:2",
        tls_ca=files["ca"],
        tls_cert=files["cert"],
        tls_key=files["key"],
        token_file=files["token"],
    )
    config = o.connect_config()
    assert config.addresses == ("a:1", "b:2")
    assert (config.tls_ca, config.cert, config.key, config.token) == (
        b"CA PEM",
        b"CERT PEM",
        b"KEY PEM",
        "t0k",
    )
    assert "t0k" not in repr(config)


def test_a_query_id_per_run_unless_one_is_given() -> None:
    assert DEFAULT.query_id_for_run().startswith(f"{STREAM}-")
    assert DEFAULT.query_id_for_run() != DEFAULT.query_id_for_run()
    assert dataclasses.replace(DEFAULT, query_id="q").query_id_for_run() == "q"


# -- tasks from a plan, for both faces ---------------------------------------------------


PLAN = Plan(
    tasks=(
        (SplitRange("east", "t", 0, 0, 3), SplitRange("west", "t", 0, 5, 9)),
        (SplitRange("east", "t", 1, 2, 4),),
    ),
    clusters={
        "east": Connection("east", "e:1", Properties()),
        "west": Connection("west", "w:1", Properties()),
    },
    generation=12,
)


def test_tasks_carry_what_the_options_ask() -> None:
    o = dataclasses.replace(
        DEFAULT,
        include_headers=True,
        fail_on_data_loss=False,
        decoding=PayloadDecoding.parse(value_format="string", mode="DROPMALFORMED"),
        kafka=check_overrides({"fetch.max.bytes": "2097152"}),
    )
    connect = ConnectConfig.parse(COORDINATOR)
    first, second = tasks_from_plan(PLAN, o, coordinator=connect, query_id="q-7")
    for task in (first, second):
        assert (task.stream, task.query_id, task.generation) == (STREAM, "q-7", 12)
        assert task.coordinator is connect
        assert task.include_headers is True
        assert task.fail_on_data_loss is False
        assert task.decoding.mode is Mode.DROPMALFORMED
        assert task.overrides.as_librdkafka_dict() == {"fetch.max.bytes": "2097152"}
    assert sorted(first.clusters) == ["east", "west"]
    assert sorted(second.clusters) == ["east"]


class RecordingPlanner:
    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def plan(self, stream: str, query_id: str, start: Any, end: Any, **sizing: int) -> Plan:
        self.asked.append({"stream": stream, "query_id": query_id, **sizing})
        return PLAN


@pytest.mark.parametrize(
    ("options", "sizing"),
    [
        (
            spark({"minPartitions": "4", "maxRecordsPerPartition": "500"}),
            {"min_partitions": 4, "max_records_per_partition": 500, "parallelism": 1},
        ),
        (
            reader({}),
            {
                "min_partitions": 1,
                "max_records_per_partition": 2**62,  # no limit
                "parallelism": 1,
            },
        ),
    ],
    ids=["spark", "reader"],
)
def test_a_micro_batch_is_planned_as_the_options_say(
    options: ReadOptions, sizing: dict[str, int]
) -> None:
    planner = RecordingPlanner()
    tasks = read_tasks(
        planner,  # type: ignore[arg-type]
        options,
        coordinator=ConnectConfig.parse(COORDINATOR),
        query_id="q",
        start={"east/t/0": 0},
        end={"east/t/0": 3},
    )
    assert planner.asked == [{"stream": STREAM, "query_id": "q", **sizing}]
    assert len(tasks) == 2
