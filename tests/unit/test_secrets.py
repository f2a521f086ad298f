"""Secrets in librdkafka properties reach clients and never any output (repr, JSON, logs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from multikafka.core._secrets import REDACTED, Properties, is_secret
from multikafka.core.model import ClusterSpec, Connection, StreamSpec

INTERNALS = ("multikafka.core._secrets",)


SECRETS = {
    "sasl.password": "pw-sasl-0001",
    "ssl.key.password": "pw-key-0002",
    "sasl.oauthbearer.client.secret": "oauth-secret-0003",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----pem-0004",
    "ssl.keystore.password": "pw-keystore-0005",
    "sasl.jaas.config": "jaas-0006",
}
PLAIN = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "reader-user",
    "client.rack": "rack-7",
}


def props() -> Properties:
    return Properties({**SECRETS, **PLAIN})


@pytest.mark.parametrize("key", sorted(SECRETS))
def test_secret_keys_are_detected(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize(
    "key",
    [*sorted(PLAIN), "ssl.certificate.location", "ssl.ca.location", "socket.timeout.ms"],
)
def test_plain_keys_are_not_secret(key: str) -> None:
    assert not is_secret(key)


def logged(p: Properties) -> str:
    """What a log line with ``p`` as an argument says."""
    return logging.LogRecord("t", logging.INFO, __file__, 1, "props: %s", (p,), None).getMessage()


@pytest.mark.parametrize("render", [repr, str, lambda p: f"{p}", logged])
def test_repr_and_str_hide_every_secret_value(render: Callable[[Properties], str]) -> None:
    text = render(props())
    for value in SECRETS.values():
        assert value not in text
    for key in SECRETS:
        assert key in text
    assert REDACTED in text
    for key, value in PLAIN.items():
        assert key in text
        assert value in text


def test_redacted_replaces_secrets_only() -> None:
    red = props().redacted()
    assert red == {**{k: REDACTED for k in SECRETS}, **PLAIN}


def test_as_librdkafka_dict_has_the_real_values() -> None:
    real = props().as_librdkafka_dict()
    assert real == {**SECRETS, **PLAIN}
    real["sasl.password"] = "changed"
    assert props()["sasl.password"] == SECRETS["sasl.password"]


def test_mapping_interface() -> None:
    p = props()
    assert len(p) == len(SECRETS) + len(PLAIN)
    assert list(p) == sorted({**SECRETS, **PLAIN})
    assert p["sasl.username"] == "reader-user"
    assert "sasl.password" in p
    assert p.get("missing") is None
    with pytest.raises(KeyError):
        p["missing"]


def test_empty_properties() -> None:
    assert len(Properties()) == 0
    assert Properties() == Properties({})
    assert Properties(None).as_librdkafka_dict() == {}


def test_properties_is_a_copy_of_its_input() -> None:
    src = {"a": "1"}
    p = Properties(src)
    src["a"] = "2"
    assert p["a"] == "1"


def test_merged_over_keeps_stored_value_for_redacted_placeholders() -> None:
    stored = props()
    incoming = Properties({**stored.redacted(), "client.rack": "rack-8"})
    merged = incoming.merged_over(stored)
    assert merged["sasl.password"] == SECRETS["sasl.password"]
    assert merged["ssl.key.pem"] == SECRETS["ssl.key.pem"]
    assert merged["client.rack"] == "rack-8"
    assert merged == Properties({**SECRETS, **PLAIN, "client.rack": "rack-8"})


def test_merged_over_takes_new_values_and_drops_removed_keys() -> None:
    stored = props()
    incoming = Properties({"sasl.password": "new-password", "security.protocol": "SSL"})
    merged = incoming.merged_over(stored)
    assert merged == Properties({"sasl.password": "new-password", "security.protocol": "SSL"})


def test_merged_over_keeps_placeholder_when_nothing_stored() -> None:
    merged = Properties({"sasl.password": REDACTED}).merged_over(Properties())
    assert merged["sasl.password"] == REDACTED


def test_equality_and_hash() -> None:
    a = Properties({"x": "1", "y": "2"})
    b = Properties({"y": "2", "x": "1"})
    c = Properties({"x": "1", "y": "3"})
    assert a == b
    assert hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2
    assert a != Properties({"x": "1"})


# -- StreamSpec and Connection --------------------------------------------------


def spec() -> StreamSpec:
    return StreamSpec(
        name="orders",
        clusters={
            "east": ClusterSpec("east:9092", ("orders",), props()),
            "west": ClusterSpec("west:9092", ("orders",)),
        },
    )


def test_stream_spec_repr_hides_secrets() -> None:
    for text in (repr(spec()), str(spec()), repr(spec().clusters["east"])):
        for value in SECRETS.values():
            assert value not in text
        assert "reader-user" in text


def test_stream_spec_redacted_json_hides_secrets() -> None:
    text = spec().to_json(redact=True)
    for value in SECRETS.values():
        assert value not in text
    doc = json.loads(text)
    assert doc["clusters"]["east"]["properties"]["sasl.password"] == REDACTED
    assert doc["clusters"]["east"]["properties"]["sasl.username"] == "reader-user"
    assert spec().to_json() == text  # redaction is the default


def test_stream_spec_unredacted_json_has_secrets() -> None:
    text = spec().to_json(redact=False)
    for value in SECRETS.values():
        assert value in text
    assert json.loads(text)["clusters"]["east"]["properties"] == {**SECRETS, **PLAIN}


def test_stream_spec_json_is_canonical() -> None:
    a = StreamSpec("s", {"b": ClusterSpec("b:1", ("t",)), "a": ClusterSpec("a:1", ("t",))})
    b = StreamSpec("s", {"a": ClusterSpec("a:1", ("t",)), "b": ClusterSpec("b:1", ("t",))})
    assert a.to_json() == b.to_json()
    assert list(json.loads(a.to_json())["clusters"]) == ["a", "b"]


def conn(bootstrap: str = "east:9092", **extra: str) -> Connection:
    return Connection("east", bootstrap, Properties({**SECRETS, **PLAIN, **extra}))


def test_connection_repr_hides_secrets() -> None:
    c = conn()
    for text in (repr(c), str(c), repr([c]), f"{c}"):
        for value in SECRETS.values():
            assert value not in text
        assert "east:9092" in text
        assert "reader-user" in text


def test_cluster_spec_connection() -> None:
    c = spec().clusters["east"].connection("east")
    assert c == Connection("east", "east:9092", props())
    assert c.fingerprint == conn().fingerprint


def test_fingerprint_is_stable() -> None:
    # Pinned: a fingerprint that changes between versions restarts every
    # sub-reader of every agent on upgrade.
    assert conn().fingerprint == "db233a0a57a12777"
    reordered = Connection("east", "east:9092", Properties(dict(reversed(list(props().items())))))
    assert reordered.fingerprint == conn().fingerprint


def test_fingerprint_changes_with_bootstrap() -> None:
    assert conn("east:9093").fingerprint != conn().fingerprint


@pytest.mark.parametrize("key", sorted({**SECRETS, **PLAIN}))
def test_fingerprint_changes_with_any_property(key: str) -> None:
    changed = Connection("east", "east:9092", Properties({**SECRETS, **PLAIN, key: "other"}))
    assert changed.fingerprint != conn().fingerprint


def test_fingerprint_changes_when_a_property_is_added_or_removed() -> None:
    assert conn(**{"fetch.min.bytes": "1"}).fingerprint != conn().fingerprint
    fewer = Connection("east", "east:9092", Properties(PLAIN))
    assert fewer.fingerprint != conn().fingerprint


def test_fingerprint_does_not_reveal_secrets() -> None:
    fp = conn().fingerprint
    assert len(fp) == 16
    int(fp, 16)  # hex digest
    for value in SECRETS.values():
        assert value not in fp
