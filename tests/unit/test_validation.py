"""Stream documents: parsing, defaults, and errors that name the field to fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from multikafka.core._secrets import Properties
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import (
    DEFAULT_REMOVED_CLUSTER_RETENTION_MS,
    AutoFailover,
    ClusterState,
    FailoverStrategy,
    StartingPosition,
    StartKind,
    StoppingPosition,
    StreamSpec,
)
from multikafka.core.validation import (
    parse_duration_ms,
    parse_starting,
    parse_stopping,
    parse_stream,
    parse_stream_json,
    validate_name,
)

INTERNALS = ("multikafka.core._secrets",)


#: The example document of the README.
README_DOC: dict[str, Any] = {
    "name": "orders",
    "clusters": {
        "east": {
            "bootstrap_servers": "127.0.0.1:19092",
            "topics": ["orders"],
            "properties": {},
            "state": "ACTIVE",
        },
        "west": {"bootstrap_servers": "127.0.0.1:29092", "topics": ["orders", "orders-eu"]},
    },
}


def doc(**west: Any) -> dict[str, Any]:
    """The README document with ``west``'s fields replaced (``None`` removes one)."""
    d = copy.deepcopy(README_DOC)
    for key, value in west.items():
        if value is None:
            d["clusters"]["west"].pop(key, None)
        else:
            d["clusters"]["west"][key] = value
    return d


def invalid(document: object, **kwargs: Any) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_stream(document, **kwargs)
    return info.value


# -- a valid document ---------------------------------------------------------


def test_readme_document_parses_with_defaults() -> None:
    spec = parse_stream(README_DOC)
    assert spec.name == "orders"
    assert set(spec.clusters) == {"east", "west"}
    east, west = spec.clusters["east"], spec.clusters["west"]
    assert east.bootstrap_servers == "127.0.0.1:19092"
    assert east.topics == ("orders",)
    assert west.topics == ("orders", "orders-eu")
    assert west.state is ClusterState.ACTIVE
    assert west.properties == Properties({})
    assert len(west.properties) == 0
    assert west.starting is None
    assert spec.auto_failover is None


def test_parse_does_not_modify_the_document() -> None:
    d = copy.deepcopy(README_DOC)
    parse_stream(d)
    assert d == README_DOC


def test_parse_stream_json_accepts_text_and_bytes() -> None:
    text = json.dumps(README_DOC)
    assert parse_stream_json(text) == parse_stream(README_DOC)
    assert parse_stream_json(text.encode()) == parse_stream(README_DOC)


@pytest.mark.parametrize("state", ["ACTIVE", "STANDBY", "DRAINING", "FAILED", "draining"])
def test_known_states_are_accepted_case_insensitively(state: str) -> None:
    spec = parse_stream(doc(state=state))
    assert spec.clusters["west"].state is ClusterState(state.upper())


def test_bootstrap_servers_list_is_normalised() -> None:
    spec = parse_stream(doc(bootstrap_servers=" a:1 , b.example.com:9092,[::1]:9093, "))
    assert spec.clusters["west"].bootstrap_servers == "a:1,b.example.com:9092,[::1]:9093"


def test_bootstrap_servers_with_scheme_are_accepted() -> None:
    spec = parse_stream(doc(bootstrap_servers="SASL_SSL://broker:9093"))
    assert spec.clusters["west"].bootstrap_servers == "SASL_SSL://broker:9093"


def test_property_values_become_strings() -> None:
    spec = parse_stream(
        doc(properties={"a.bool": True, "b.bool": False, "c.int": 3, "d.float": 1.5, "e": "x"})
    )
    assert spec.clusters["west"].properties.as_librdkafka_dict() == {
        "a.bool": "true",
        "b.bool": "false",
        "c.int": "3",
        "d.float": "1.5",
        "e": "x",
    }


def test_starting_positions() -> None:
    spec = parse_stream(doc(starting="latest"))
    assert spec.clusters["west"].starting == StartingPosition(StartKind.LATEST)
    spec = parse_stream(doc(starting={"timestamp": 1_700_000_000_000}))
    assert spec.clusters["west"].starting == StartingPosition(
        StartKind.TIMESTAMP, 1_700_000_000_000
    )


# -- required fields and shapes ----------------------------------------------


def test_missing_bootstrap_servers_names_the_field() -> None:
    err = invalid(doc(bootstrap_servers=None))
    assert err.field == "clusters.west.bootstrap_servers"
    assert "required" in str(err)
    assert str(err) == "clusters.west.bootstrap_servers: required"


def test_null_bootstrap_servers_is_missing() -> None:
    d = doc()
    d["clusters"]["west"]["bootstrap_servers"] = None
    assert invalid(d).field == "clusters.west.bootstrap_servers"


def test_missing_topics_names_the_field() -> None:
    err = invalid(doc(topics=None))
    assert err.field == "clusters.west.topics"
    assert "required" in str(err)


@pytest.mark.parametrize("key", ["name", "clusters"])
def test_missing_top_level_field(key: str) -> None:
    d = copy.deepcopy(README_DOC)
    del d[key]
    err = invalid(d)
    assert err.field == key
    assert "required" in err.problem


@pytest.mark.parametrize("document", [[], "orders", None, 3])
def test_document_must_be_an_object(document: object) -> None:
    err = invalid(document)
    assert err.field == ""
    assert "must be an object" in str(err)


def test_no_clusters() -> None:
    d = copy.deepcopy(README_DOC)
    d["clusters"] = {}
    err = invalid(d)
    assert err.field == "clusters"
    assert "at least one cluster" in str(err)


def test_clusters_must_be_an_object() -> None:
    d = copy.deepcopy(README_DOC)
    d["clusters"] = [README_DOC["clusters"]["east"]]
    err = invalid(d)
    assert err.field == "clusters"
    assert "must be an object" in err.problem
    assert "a list" in err.problem


def test_cluster_must_be_an_object() -> None:
    d = copy.deepcopy(README_DOC)
    d["clusters"]["west"] = "127.0.0.1:29092"
    err = invalid(d)
    assert err.field == "clusters.west"
    assert "must be an object" in err.problem


def test_empty_topics() -> None:
    err = invalid(doc(topics=[]))
    assert err.field == "clusters.west.topics"
    assert "at least one topic" in str(err)


def test_duplicate_topic_names_the_entry() -> None:
    err = invalid(doc(topics=["orders", "orders-eu", "orders"]))
    assert err.field == "clusters.west.topics[2]"
    assert "'orders'" in err.problem
    assert "twice" in err.problem


@pytest.mark.parametrize("topic", ["orders eu", "orders/eu", "", ".", "..", "x" * 250, "ordérs"])
def test_invalid_topic_name(topic: str) -> None:
    err = invalid(doc(topics=["orders", topic]))
    assert err.field == "clusters.west.topics[1]"
    assert "not a valid Kafka topic name" in err.problem


def test_longest_topic_name_is_accepted() -> None:
    spec = parse_stream(doc(topics=["x" * 249]))
    assert spec.clusters["west"].topics == ("x" * 249,)


def test_topic_entry_must_be_a_string() -> None:
    err = invalid(doc(topics=["orders", 7]))
    assert err.field == "clusters.west.topics[1]"
    assert "must be a string" in err.problem


def test_topics_as_a_string_is_refused() -> None:
    err = invalid(doc(topics="orders"))
    assert err.field == "clusters.west.topics"
    assert "must be a list" in err.problem
    assert "a string" in err.problem


@pytest.mark.parametrize("name", ["east/1", "a/b", "-east", "", "east west", "x" * 129])
def test_bad_cluster_name(name: str) -> None:
    d = copy.deepcopy(README_DOC)
    d["clusters"][name] = d["clusters"].pop("west")
    err = invalid(d)
    assert err.field == f"clusters.{name}"
    assert "not a valid name" in err.problem


def test_bad_stream_name() -> None:
    d = copy.deepcopy(README_DOC)
    d["name"] = "orders/eu"
    err = invalid(d)
    assert err.field == "name"
    assert "'orders/eu'" in err.problem


def test_stream_name_must_be_a_string() -> None:
    d = copy.deepcopy(README_DOC)
    d["name"] = 42
    err = invalid(d)
    assert err.field == "name"
    assert "must be a string" in err.problem


def test_unknown_state() -> None:
    err = invalid(doc(state="PAUSED"))
    assert err.field == "clusters.west.state"
    assert "'PAUSED'" in err.problem
    for state in ClusterState:
        assert state.value in err.problem


def test_state_must_be_a_string() -> None:
    err = invalid(doc(state=1))
    assert err.field == "clusters.west.state"
    assert "must be a string" in err.problem


def test_properties_must_be_an_object() -> None:
    err = invalid(doc(properties=["security.protocol=SSL"]))
    assert err.field == "clusters.west.properties"
    assert "must be an object" in err.problem


@pytest.mark.parametrize("value", [["a"], {"a": 1}, None])
def test_property_value_must_be_scalar(value: object) -> None:
    err = invalid(doc(properties={"security.protocol": "SSL", "client.rack": value}))
    assert err.field == "clusters.west.properties.client.rack"
    assert "must be a string, number or boolean" in err.problem


@pytest.mark.parametrize("value", [9092, ["127.0.0.1:29092"], {"host": "x"}])
def test_bootstrap_servers_must_be_a_string(value: object) -> None:
    err = invalid(doc(bootstrap_servers=value))
    assert err.field == "clusters.west.bootstrap_servers"
    assert "must be a string" in err.problem


@pytest.mark.parametrize(
    "servers",
    ["broker:0", "broker:65536", "broker:99999", "broker", "broker:", ":9092", "a:1,b", " , "],
)
def test_bootstrap_servers_must_be_host_port(servers: str) -> None:
    err = invalid(doc(bootstrap_servers=servers))
    assert err.field == "clusters.west.bootstrap_servers"


def test_port_out_of_range_names_the_server() -> None:
    err = invalid(doc(bootstrap_servers="a:9092,b:70000"))
    assert err.field == "clusters.west.bootstrap_servers"
    assert "'b:70000'" in err.problem
    assert "1-65535" in err.problem


@pytest.mark.parametrize("port", [1, 65535])
def test_port_limits_are_accepted(port: int) -> None:
    spec = parse_stream(doc(bootstrap_servers=f"broker:{port}"))
    assert spec.clusters["west"].bootstrap_servers == f"broker:{port}"


def test_unknown_cluster_field_is_named() -> None:
    err = invalid(doc(topic=["orders"]))
    assert err.field == "clusters.west.topic"
    assert "unknown field" in err.problem
    assert "topics" in err.problem


def test_unknown_stream_field_is_named() -> None:
    d = copy.deepcopy(README_DOC)
    d["auto_fallover"] = {}
    err = invalid(d)
    assert err.field == "auto_fallover"
    assert "unknown field" in err.problem
    assert "auto_failover" in err.problem


@pytest.mark.parametrize(
    "key", ["bootstrap.servers", "enable.auto.commit", "enable.auto.offset.store"]
)
def test_reserved_properties_are_refused(key: str) -> None:
    err = invalid(doc(properties={"client.rack": "r1", key: "x"}))
    assert err.field == f"clusters.west.properties.{key}"
    assert "may not be set" in err.problem


def test_an_isolation_level_librdkafka_lacks_is_refused() -> None:
    err = invalid(doc(properties={"isolation.level": "READ_COMMITTED"}))
    assert err.field == "clusters.west.properties.isolation.level"
    assert "read_committed or read_uncommitted" in err.problem


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_isolation_levels_are_taken(level: str) -> None:
    spec = parse_stream(doc(properties={"isolation.level": level}))
    assert spec.clusters["west"].properties["isolation.level"] == level


def test_reserved_bootstrap_property_points_to_the_field() -> None:
    err = invalid(doc(properties={"bootstrap.servers": "x:1"}))
    assert "bootstrap_servers" in err.problem


@pytest.mark.parametrize(
    "starting", ["middle", {"timestamp": -1}, {"timestamp": True}, {"timestamp": "1"}, 5]
)
def test_bad_starting(starting: object) -> None:
    err = invalid(doc(starting=starting))
    assert err.field == "clusters.west.starting"
    assert "earliest" in err.problem


# -- expected name, JSON text -------------------------------------------------


def test_expected_name_matches() -> None:
    assert parse_stream(README_DOC, expected_name="orders").name == "orders"


def test_expected_name_mismatch() -> None:
    err = invalid(README_DOC, expected_name="payments")
    assert err.field == "name"
    assert "'orders'" in err.problem
    assert "'payments'" in err.problem


@pytest.mark.parametrize("text", ["{", "", "not json", b"\xff\xfe{"])
def test_invalid_json_text(text: str | bytes) -> None:
    with pytest.raises(ValidationError) as info:
        parse_stream_json(text)
    assert info.value.field == ""
    assert "not valid JSON" in str(info.value)


def test_json_text_is_validated() -> None:
    with pytest.raises(ValidationError) as info:
        parse_stream_json(json.dumps(doc(bootstrap_servers=None)))
    assert info.value.field == "clusters.west.bootstrap_servers"


def test_json_expected_name_mismatch() -> None:
    with pytest.raises(ValidationError) as info:
        parse_stream_json(json.dumps(README_DOC), expected_name="other")
    assert info.value.field == "name"


# -- auto failover ------------------------------------------------------------


def failover_doc(**auto: Any) -> dict[str, Any]:
    d = doc(state="STANDBY")
    d["auto_failover"] = {"standby": "west", **auto}
    return d


def test_auto_failover_with_durations() -> None:
    spec = parse_stream(failover_doc(unreachable_after="30s", margin="2m", strategy="identity"))
    assert spec.auto_failover == AutoFailover(
        standby="west",
        unreachable_after_ms=30_000,
        strategy=FailoverStrategy.IDENTITY,
        margin_ms=120_000,
    )


def test_auto_failover_defaults() -> None:
    spec = parse_stream(failover_doc(unreachable_after_ms=1500))
    assert spec.auto_failover == AutoFailover("west", 1500, FailoverStrategy.TIMESTAMP, 30_000)


def test_auto_failover_null_is_none() -> None:
    d = copy.deepcopy(README_DOC)
    d["auto_failover"] = None
    assert parse_stream(d).auto_failover is None


def test_auto_failover_standby_must_be_a_cluster() -> None:
    d = failover_doc(unreachable_after="30s")
    d["auto_failover"]["standby"] = "north"
    err = invalid(d)
    assert err.field == "auto_failover.standby"
    assert "'north'" in err.problem


def test_auto_failover_standby_required() -> None:
    d = failover_doc(unreachable_after="30s")
    del d["auto_failover"]["standby"]
    err = invalid(d)
    assert err.field == "auto_failover.standby"
    assert "required" in err.problem


def test_auto_failover_window_required() -> None:
    err = invalid(failover_doc())
    assert err.field == "auto_failover.unreachable_after_ms"
    assert "required" in err.problem


@pytest.mark.parametrize("window", ["0s", 0, "0ms"])
def test_auto_failover_window_must_be_positive(window: object) -> None:
    err = invalid(failover_doc(unreachable_after=window))
    assert err.field == "auto_failover.unreachable_after"
    assert "longer than zero" in err.problem


def test_auto_failover_bad_window() -> None:
    err = invalid(failover_doc(unreachable_after="soon"))
    assert err.field == "auto_failover.unreachable_after"
    assert "'soon'" in err.problem


def test_auto_failover_bad_margin() -> None:
    err = invalid(failover_doc(unreachable_after="30s", margin_ms=-1))
    assert err.field == "auto_failover.margin_ms"


@pytest.mark.parametrize("strategy", ["offsets", "TIMESTAMP", 1])
def test_auto_failover_unknown_strategy(strategy: object) -> None:
    err = invalid(failover_doc(unreachable_after="30s", strategy=strategy))
    assert err.field == "auto_failover.strategy"
    assert "unknown strategy" in err.problem
    assert "timestamp, identity, mm2" in err.problem


def test_auto_failover_unknown_field() -> None:
    err = invalid(failover_doc(unreachable_after="30s", standby_cluster="west"))
    assert err.field == "auto_failover.standby_cluster"
    assert "unknown field" in err.problem


def test_auto_failover_must_be_an_object() -> None:
    d = copy.deepcopy(README_DOC)
    d["auto_failover"] = "west"
    err = invalid(d)
    assert err.field == "auto_failover"


# -- durations, starting, names ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("7d", 604_800_000),
        (1500, 1500),
        ("1500", 1500),
        (0, 0),
        (" 30s ", 30_000),
    ],
)
def test_durations(value: object, ms: int) -> None:
    assert parse_duration_ms(value, "d") == ms


@pytest.mark.parametrize(
    "value", ["1.5s", "30 s", "-1s", "30S", "1w", "s", "", -1, 1.5, True, None, [30]]
)
def test_invalid_durations(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms(value, "auto_failover.margin")
    assert info.value.field == "auto_failover.margin"


def test_duration_error_shows_the_value_and_an_example() -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms("soon", "x")
    assert "'soon'" in info.value.problem
    assert "30s" in info.value.problem


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("earliest", StartingPosition(StartKind.EARLIEST)),
        ("LATEST", StartingPosition(StartKind.LATEST)),
        ({"timestamp": 0}, StartingPosition(StartKind.TIMESTAMP, 0)),
        ({"timestamp": 123}, StartingPosition(StartKind.TIMESTAMP, 123)),
    ],
)
def test_parse_starting(value: object, expected: StartingPosition) -> None:
    assert parse_starting(value, "s") == expected


def test_parse_starting_refuses_extra_keys() -> None:
    with pytest.raises(ValidationError) as info:
        parse_starting({"timestamp": 1, "offset": 2}, "clusters.x.starting")
    assert info.value.field == "clusters.x.starting"


@pytest.mark.parametrize("name", ["a", "east", "East-1", "orders_v2.eu", "9", "x" * 128])
def test_valid_names(name: str) -> None:
    assert validate_name(name, "n") == name


@pytest.mark.parametrize("name", ["", "a/b", "_a", ".a", "a b", "x" * 129, "é"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_name(name, "clusters.bad")
    assert info.value.field == "clusters.bad"
    assert "not a valid name" in info.value.problem


def test_name_must_be_a_string() -> None:
    with pytest.raises(ValidationError) as info:
        validate_name(None, "name")
    assert info.value.problem == "must be a string, got null"


def test_name_with_trailing_newline_is_refused() -> None:
    with pytest.raises(ValidationError):
        validate_name("east\n", "clusters.east")


def test_topic_with_trailing_newline_is_refused() -> None:
    err = invalid(doc(topics=["orders\n"]))
    assert err.field == "clusters.west.topics[0]"


def test_error_str_is_field_colon_problem() -> None:
    err = ValidationError("clusters.west.topics", "must name at least one topic")
    assert str(err) == "clusters.west.topics: must name at least one topic"
    assert str(ValidationError("", "not valid JSON")) == "not valid JSON"


# -- round trip ---------------------------------------------------------------


def full_spec() -> StreamSpec:
    d = copy.deepcopy(README_DOC)
    d["clusters"]["east"]["properties"] = {
        "security.protocol": "SASL_SSL",
        "sasl.username": "reader",
        "sasl.password": "hunter2",
        "socket.timeout.ms": 5000,
    }
    d["clusters"]["east"]["starting"] = {"timestamp": 1_700_000_000_000}
    d["clusters"]["west"]["state"] = "standby"
    d["clusters"]["west"]["starting"] = "latest"
    d["clusters"]["east"]["stopping"] = {"offsets": {"orders/1": 980, "orders/0": 1200}}
    d["clusters"]["west"]["stopping"] = {"timestamp": 1_767_225_600_000}
    d["auto_failover"] = {"standby": "west", "unreachable_after": "45s", "margin": "1m"}
    d["removed_cluster_retention"] = "2h"
    return parse_stream(d)


def test_round_trip_without_redaction() -> None:
    spec = full_spec()
    again = parse_stream(spec.to_document(redact=False))
    assert again == spec
    assert again.clusters["east"].properties["sasl.password"] == "hunter2"
    assert parse_stream_json(spec.to_json(redact=False)) == spec


def test_round_trip_of_minimal_document() -> None:
    spec = parse_stream(README_DOC)
    assert parse_stream(spec.to_document(redact=False)) == spec


def test_redacted_document_loses_the_secret_but_merges_back() -> None:
    spec = full_spec()
    redacted = parse_stream(spec.to_document(redact=True))
    assert redacted != spec
    east = redacted.clusters["east"]
    merged = east.properties.merged_over(spec.clusters["east"].properties)
    assert merged == spec.clusters["east"].properties


# -- input that is not text, too deep or too large (found by tests/integration/test_fuzz.py) --


@pytest.mark.parametrize("where", ["key", "value"])
def test_property_that_is_not_unicode_text_is_refused(where: str) -> None:
    """JSON's escapes decode to lone surrogates, which no Kafka client takes."""
    props = {"\udc80": "x"} if where == "key" else {"client.id": "a\udc80"}
    error = invalid(doc(properties=props))
    assert (
        error.problem
        == f"the {where} is not Unicode text (it holds a lone surrogate such as \\udc80)"
    )
    str(error).encode("utf-8")  # the message itself is sendable: escaped


def test_property_value_with_nul_is_refused() -> None:
    """librdkafka would silently cut the value at the NUL."""
    error = invalid(doc(properties={"sasl.password": "ab\x00cd"}))
    assert (error.field, error.problem) == (
        "clusters.west.properties.sasl.password",
        "the value holds a NUL character",
    )


def test_unknown_field_that_is_not_text_is_named_escaped() -> None:
    d = copy.deepcopy(README_DOC)
    d["\ud800"] = 1
    error = invalid(d)
    assert error.field == "\\ud800"


def test_non_ascii_text_is_kept_and_stored_as_utf8() -> None:
    spec = parse_stream(doc(properties={"client.id": "h\u00e9llo-\U0001f600"}))
    stored = spec.to_json(redact=False)
    assert "h\u00e9llo-\U0001f600" in stored  # not \u escapes (6 bytes for 2)
    assert parse_stream_json(stored) == spec


@pytest.mark.parametrize("depth", [65, 2000, 100_000])
def test_document_nested_too_deep_is_refused(depth: int) -> None:
    text = '{"name": "x", "extra": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ValidationError, match="nested more than 64 levels deep"):
        parse_stream_json(text)


def test_unknown_field_64_levels_deep_is_named() -> None:
    """Up to the limit the usual error names the field."""
    text = '{"name": "x", "extra": ' + "[" * 63 + "]" * 63 + "}"
    with pytest.raises(ValidationError, match=r"^extra: unknown field"):
        parse_stream_json(text)


@pytest.mark.parametrize("value", [2**63, 10**30, "9223372036854775808ms", "2562047788016h"])
def test_durations_beyond_int64_ms_are_refused(value: object) -> None:
    with pytest.raises(ValidationError, match=r"at most 9,223,372,036,854,775,807 \(int64\)"):
        parse_duration_ms(value, "margin")


def test_largest_duration_is_int64_max() -> None:
    assert parse_duration_ms(2**63 - 1, "margin") == 2**63 - 1


def test_starting_timestamp_beyond_int64_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"^s\.timestamp: .*int64"):
        parse_starting({"timestamp": 2**63}, "s")


def test_json_null_is_not_an_object_not_too_deep() -> None:
    with pytest.raises(ValidationError, match="must be an object, got null"):
        parse_stream_json("null")


# -- stopping positions and the removed-cluster retention ---------------------


def test_stopping_offsets_and_timestamp() -> None:
    spec = parse_stream(doc(stopping={"offsets": {"orders-eu/3": 7, "orders/0": 1200}}))
    west = spec.clusters["west"]
    assert west.stopping == StoppingPosition(offsets=((("orders", 0), 1200), (("orders-eu", 3), 7)))
    assert west.stopping.split_offsets("west") == {"west/orders/0": 1200, "west/orders-eu/3": 7}
    assert west.to_document()["stopping"] == {"offsets": {"orders/0": 1200, "orders-eu/3": 7}}
    at = parse_stream(doc(stopping={"timestamp": 1_767_225_600_000})).clusters["west"]
    assert at.stopping == StoppingPosition(timestamp_ms=1_767_225_600_000)
    assert at.to_document()["stopping"] == {"timestamp": 1_767_225_600_000}
    assert spec.clusters["east"].stopping is None
    assert "stopping" not in spec.clusters["east"].to_document()


def test_stopping_round_trips_through_canonical_json() -> None:
    spec = full_spec()
    text = spec.to_json(redact=False)
    assert '"stopping": {"offsets": {"orders/0": 1200, "orders/1": 980}}' in text
    assert '"removed_cluster_retention_ms": 7200000' in text
    assert parse_stream_json(text) == spec


@pytest.mark.parametrize(
    ("stopping", "field", "says"),
    [
        ({"offsets": {"orders/0": -1}}, "offsets.orders/0", "whole number >= 0"),
        ({"offsets": {"orders/0": 1.5}}, "offsets.orders/0", "whole number >= 0"),
        ({"offsets": {"orders/0": True}}, "offsets.orders/0", "whole number >= 0"),
        ({"offsets": {"orders/0": 2**63}}, "offsets.orders/0", "int64"),
        ({"offsets": {"payments/0": 5}}, "offsets.payments/0", "not one of this cluster's"),
        ({"offsets": {"orders": 5}}, "offsets.orders", "'<topic>/<partition>'"),
        ({"offsets": {"orders/01": 5}}, "offsets.orders/01", "'<topic>/<partition>'"),
        ({"offsets": {"orders/2147483648": 5}}, "offsets.orders/2147483648", "partition"),
        ({"offsets": {}}, "offsets", "at least one partition"),
        ({"offsets": [1]}, "offsets", "must be an object"),
        ({"timestamp": -5}, "timestamp", ">= 0"),
        ({"timestamp": "soon"}, "timestamp", "milliseconds since the epoch"),
        ({"timestamp": 1, "offsets": {"orders/0": 1}}, "", "exactly one of offsets or timestamp"),
        ({"until": 1}, "until", "unknown field; allowed: offsets, timestamp"),
        ({}, "", "exactly one"),
        ("latest", "", "must be {"),
    ],
)
def test_bad_stopping_says_what_to_fix(stopping: object, field: str, says: str) -> None:
    err = invalid(doc(stopping=stopping))
    assert err.field == "clusters.west.stopping" + (f".{field}" if field else "")
    assert says in err.problem


def test_stopping_offsets_name_the_clusters_topics() -> None:
    err = invalid(doc(stopping={"offsets": {"payments/0": 5}}))
    assert "orders, orders-eu" in err.problem
    assert parse_stopping({"offsets": {"o.v2/12": 3}}, "s", ("o.v2",)).offsets == (
        (("o.v2", 12), 3),
    )


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        ({}, None),
        ({"removed_cluster_retention": "7d"}, 604_800_000),
        ({"removed_cluster_retention": "90m"}, 5_400_000),
        ({"removed_cluster_retention_ms": 0}, 0),
        ({"removed_cluster_retention_ms": 1500}, 1500),
    ],
)
def test_removed_cluster_retention(given: dict[str, Any], ms: int | None) -> None:
    spec = parse_stream({**README_DOC, **given})
    assert spec.removed_cluster_retention_ms == ms
    assert spec.retention_ms == (DEFAULT_REMOVED_CLUSTER_RETENTION_MS if ms is None else ms)
    assert parse_stream(spec.to_document(redact=False)) == spec


def test_default_retention_is_a_week_and_is_not_written_out() -> None:
    spec = parse_stream(README_DOC)
    assert spec.retention_ms == 7 * 24 * 3600 * 1000
    assert "removed_cluster_retention_ms" not in spec.to_document()


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"removed_cluster_retention": "-1s"}, "removed_cluster_retention", "duration"),
        ({"removed_cluster_retention": "1w"}, "removed_cluster_retention", "duration"),
        ({"removed_cluster_retention_ms": -1}, "removed_cluster_retention_ms", "negative"),
        ({"removed_cluster_retention_ms": True}, "removed_cluster_retention_ms", "boolean"),
        (
            {"removed_cluster_retention": "1h", "removed_cluster_retention_ms": 5},
            "removed_cluster_retention_ms",
            "not both",
        ),
        ({"removed_cluster_retention_s": 60}, "removed_cluster_retention_s", "unknown field"),
    ],
)
def test_bad_retention_says_what_to_fix(given: dict[str, Any], field: str, says: str) -> None:
    err = invalid({**README_DOC, **given})
    assert err.field == field
    assert says in err.problem


# -- mm2 blocks: a cluster that is MirrorMaker 2's replica of another --------------


def _mirrored(mm2: object, mirror_topics: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": "orders",
        "clusters": {
            "east": {"bootstrap_servers": "e:9092", "topics": ["orders", "pay"]},
            "west": {
                "bootstrap_servers": "w:9092",
                "topics": mirror_topics or ["east.orders", "east.pay"],
                "state": "STANDBY",
                "mm2": mm2,
            },
        },
    }


def test_an_mm2_block_takes_mm2_s_defaults() -> None:
    from multikafka.core.mm2 import Mm2Mirror, ReplicationPolicy, SyncsLocation

    spec = parse_stream(_mirrored({"source": "east"}))
    mirror = spec.clusters["west"].mm2
    assert mirror == Mm2Mirror("east", "east", "west")
    assert mirror.replication_policy is ReplicationPolicy.DEFAULT
    assert mirror.offset_syncs_topic_location is SyncsLocation.SOURCE
    # MM2's default: the syncs topic lives on the source, named for the target alias.
    assert (mirror.syncs_cluster("west"), mirror.offset_syncs_topic) == (
        "east",
        "mm2-offset-syncs.west.internal",
    )
    assert mirror.checkpoints_topic == "east.checkpoints.internal"
    # The document round-trips, defaults written out.
    assert parse_stream(spec.to_document(redact=False)) == spec
    assert spec.counterpart_topic("west", "east", "east.pay") == "pay"
    assert spec.counterpart_topic("east", "west", "pay") == "east.pay"
    assert spec.counterpart_topic("west", "east", "nope") is None


def test_an_mm2_block_with_aliases_identity_and_kip_716() -> None:
    spec = parse_stream(
        _mirrored(
            {
                "source": "east",
                "source_alias": "us-east",
                "target_alias": "us-west",
                "replication_policy": "identity",
                "offset_syncs_topic_location": "target",
            },
            ["orders", "pay"],
        )
    )
    mirror = spec.clusters["west"].mm2
    assert mirror is not None
    assert (mirror.syncs_cluster("west"), mirror.offset_syncs_topic) == (
        "west",
        "mm2-offset-syncs.us-east.internal",
    )
    assert spec.counterpart_topic("west", "east", "pay") == "pay"


@pytest.mark.parametrize(
    ("mm2", "topics", "field", "says"),
    [
        ({"source": "south"}, None, "clusters.west.mm2.source", "not a cluster of this stream"),
        ({"source": "west"}, None, "clusters.west.mm2.source", "names this cluster itself"),
        ({}, None, "clusters.west.mm2.source", "required"),
        ({"source": "east", "flavour": 1}, None, "clusters.west.mm2.flavour", "unknown field"),
        (
            {"source": "east", "replication_policy": "prefix"},
            None,
            "clusters.west.mm2.replication_policy",
            "must be one of default, identity",
        ),
        (
            {"source": "east", "offset_syncs_topic_location": "elsewhere"},
            None,
            "clusters.west.mm2.offset_syncs_topic_location",
            "must be one of source, target",
        ),
        (
            {"source": "east"},
            ["orders", "pay"],
            "clusters.west.topics",
            "'orders' on the source is 'east.orders' on the mirror",
        ),
        (
            {"source": "east", "source_alias": "us-east"},
            None,
            "clusters.west.topics",
            "'east.orders' on the mirror is no source topic's remote topic",
        ),
        (
            {"source": "east", "target_alias": "a/b"},
            None,
            "clusters.west.mm2.target_alias",
            "not a valid name",
        ),
    ],
)
def test_a_bad_mm2_block_says_what_to_fix(
    mm2: object, topics: list[str] | None, field: str, says: str
) -> None:
    with pytest.raises(ValidationError) as err:
        parse_stream(_mirrored(mm2, topics))
    assert err.value.field == field
    assert says in str(err.value)


def test_automatic_mm2_failover_needs_an_mm2_standby() -> None:
    doc = _mirrored({"source": "east"})
    doc["auto_failover"] = {"standby": "west", "unreachable_after": "5s", "strategy": "mm2"}
    assert parse_stream(doc).auto_failover.strategy is FailoverStrategy.MM2  # type: ignore[union-attr]
    del doc["clusters"]["west"]["mm2"]
    doc["clusters"]["west"]["topics"] = ["orders"]
    with pytest.raises(ValidationError) as err:
        parse_stream(doc)
    assert err.value.field == "auto_failover.strategy"
    assert "its mm2 block" in str(err.value)
