"""ConfigProvider references in cluster properties (multikafka.core._references):
checked at the put, resolved where a client is made, never shown resolved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multikafka.core._kafka_config import client_config
from multikafka.core._references import (
    UnresolvedReferenceError,
    check_references,
    resolve_properties,
)
from multikafka.core._secrets import REDACTED, Properties
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import Connection
from multikafka.core.validation import parse_stream

INTERNALS = (
    "multikafka.core._kafka_config",
    "multikafka.core._references",
    "multikafka.core._secrets",
)


SECRET = "pa55-w0rd=with:colons"


@pytest.fixture
def secret_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "east.properties").write_text(
        f"# a comment\n! another\nsasl.username = east-user\nsasl.password={SECRET}\n"
    )
    mounted = tmp_path / "secret"
    mounted.mkdir()
    (mounted / "password").write_text(SECRET + "\n")  # as echo writes it
    monkeypatch.setenv("EAST_PASSWORD", SECRET)
    return tmp_path


def test_each_provider_resolves_where_the_client_is_made(secret_files: Path) -> None:
    props = {
        "a": f"${{file:{secret_files}/east.properties:sasl.password}}",
        "b": f"${{directory:{secret_files}/secret:password}}",
        "c": "${env:EAST_PASSWORD}",
        "sasl.jaas.config": (
            f'x username="${{file:{secret_files}/east.properties:sasl.username}}" '
            'password="${env:EAST_PASSWORD}";'
        ),
        "plain": "10",
    }
    resolved = resolve_properties("east", props)
    assert resolved["a"] == resolved["b"] == resolved["c"] == SECRET
    assert resolved["sasl.jaas.config"] == f'x username="east-user" password="{SECRET}";'
    assert resolved["plain"] == "10"
    config = client_config(
        Connection("east", "k:9092", Properties({"sasl.password": props["a"]})), {}
    )
    assert config["sasl.password"] == SECRET


def test_a_reference_is_shown_as_written_and_holds_no_secret(secret_files: Path) -> None:
    ref = f"${{file:{secret_files}/east.properties:sasl.password}}"
    props = Properties({"sasl.password": ref, "ssl.key.password": "clear"})
    assert props.redacted() == {"sasl.password": ref, "ssl.key.password": REDACTED}
    assert props.has_secrets()
    assert not Properties({"sasl.password": ref}).has_secrets()
    assert SECRET not in repr(props)
    # the fingerprint is the reference's: a stream document never holds the value
    assert SECRET not in json.dumps(Properties({"sasl.password": ref}).as_librdkafka_dict())


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("${file:/nope/x.properties:k}", "cannot read /nope/x.properties"),
        ("${file:{dir}/east.properties:missing.key}", "has no key 'missing.key'"),
        ("${directory:{dir}/secret:absent}", "cannot read"),
        ("${env:NOT_SET_ANYWHERE_42}", "NOT_SET_ANYWHERE_42 is not set"),
        ("${env:MULTIKAFKA_ADMIN_TOKEN}", "never handed to a Kafka client"),
        ("${vault:/x:y}", "config provider 'vault'"),
    ],
)
def test_an_unresolvable_reference_names_cluster_property_and_reference(
    secret_files: Path, ref: str, why: str
) -> None:
    ref = ref.replace("{dir}", str(secret_files))
    with pytest.raises(UnresolvedReferenceError) as info:
        client_config(Connection("east", "k:9092", Properties({"sasl.password": ref})), {})
    message = str(info.value)
    assert "cluster 'east'" in message
    assert "property 'sasl.password'" in message
    assert ref[:40] in message
    assert why in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("${vault:secret/x:y}", "use one of file, directory, env"),
        ("${file:relative/x.properties:k}", "must be absolute"),
        ("${file:k}", "PATH"),
        ("${directory:/etc/s:../other}", "not a path"),
        ("${env:MULTIKAFKA_READER_TOKEN}", "MULTIKAFKA_"),
        ("${env:not a name}", "${env:NAME}"),
    ],
)
def test_malformed_references_are_refused_at_the_put(value: str, why: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_references(value, "clusters.a.properties.sasl.password")
    assert why in str(info.value)
    doc = {
        "name": "s",
        "clusters": {"a": {"bootstrap_servers": "k:9092", "topics": ["t"]}},
    }
    doc["clusters"]["a"]["properties"] = {"sasl.password": value}  # type: ignore[index]
    with pytest.raises(ValidationError) as put:
        parse_stream(doc)
    assert put.value.field == "clusters.a.properties.sasl.password"


def test_text_without_a_reference_is_left_alone() -> None:
    props = {"x": "cost is $5 {not} ${", "y": "plain"}
    assert resolve_properties("c", props) == props
    check_references(props["x"], "x")
