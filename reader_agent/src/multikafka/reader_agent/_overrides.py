"""A query's own librdkafka settings for its reader consumers (the Spark
source's ``kafka.*`` options, the standalone reader's ``kafka=``).

They apply to the consumers that read the query's ranges on every cluster
of its stream, over multikafka's defaults and the clusters' properties from
the stream document. Settings multikafka must own are refused: group and
commit settings (readers never join a group or commit with their consumer),
``auto.offset.reset`` (a range before the log start is data loss, and
``failOnDataLoss`` decides), the brokers (the stream document names them),
and every security or credential setting (cluster credentials come from the
stream document, never from query options). Java client names librdkafka
does not have are refused with the name to use. What is left is checked
by librdkafka itself, on the caller's side, before any task runs.

Values may be things users consider sensitive: they are never shown (``repr``
shows the keys only; errors name the key).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException

from multikafka.core._kafka_config import READER_DEFAULTS, READER_GROUP_ID
from multikafka.core._secrets import REDACTED, Properties
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import Connection

_CREDENTIALS = (
    "cluster credentials and security come from the stream document (its clusters' "
    "properties), never from query options"
)
_NO_COMMIT = (
    "multikafka's reader consumers never commit (Spark's checkpoint holds the position; "
    "commitGroupId commits each batch's end to a group after Spark commits it)"
)
_NO_GROUP = "multikafka's reader consumers assign exact ranges and never join a group"

#: Settings multikafka owns -> why.
OWNED: dict[str, str] = {
    "group.id": _NO_GROUP + "; to commit offsets to a group for lag tools, use commitGroupId",
    "group.instance.id": _NO_GROUP,
    "group.protocol": _NO_GROUP,
    "group.remote.assignor": _NO_GROUP,
    "partition.assignment.strategy": _NO_GROUP,
    "enable.auto.commit": _NO_COMMIT,
    "enable.auto.offset.store": _NO_COMMIT,
    "auto.offset.reset": (
        "multikafka sets it to error: a range that starts before the log start is data "
        "loss, and failOnDataLoss decides what happens"
    ),
    "bootstrap.servers": "the stream document names each cluster's brokers",
    "metadata.broker.list": "the stream document names each cluster's brokers",
    "security.protocol": _CREDENTIALS,
    "enable.ssl.certificate.verification": _CREDENTIALS,
    "plugin.library.paths": "loading librdkafka plugins is not a read setting",
}
#: Prefixes of settings multikafka owns -> why.
OWNED_PREFIXES: dict[str, str] = {
    "sasl": _CREDENTIALS,
    "ssl": _CREDENTIALS,
    "https.": _CREDENTIALS,
    "group.": _NO_GROUP,
}
#: Java consumer settings (Spark's Kafka source passes them to a Java
#: client) librdkafka does not have -> what to do instead.
JAVA_ONLY: dict[str, str] = {
    "max.poll.records": (
        "librdkafka has no per-poll record limit; the agent consumes in batches of its own, "
        "and maxOffsetsPerTrigger / maxRecordsPerPartition size what a task reads"
    ),
    "fetch.max.wait.ms": "librdkafka's name for it is kafka.fetch.wait.max.ms",
    "receive.buffer.bytes": "librdkafka's name for it is kafka.socket.receive.buffer.bytes",
    "send.buffer.bytes": "librdkafka's name for it is kafka.socket.send.buffer.bytes",
    "key.deserializer": "keys are bytes, or decoded with the keyFormat option",
    "value.deserializer": "values are bytes, or decoded with the valueFormat option",
    "interceptor.classes": "Java interceptors do not exist in librdkafka",
    "default.api.timeout.ms": "librdkafka has no such setting",
    "request.timeout.ms": "a producer setting in librdkafka; for consumers see socket.timeout.ms",
    "security.providers": _CREDENTIALS,
}

_VALUE = re.compile(r'value "[^"]*"')


class Overrides(Properties):
    """A query's librdkafka settings: every value hidden in ``repr`` and
    :meth:`redacted` (only the keys show)."""

    __slots__ = ()

    def redacted(self) -> dict[str, str]:
        return dict.fromkeys(self, REDACTED)

    @property
    def fingerprint(self) -> str:
        """A digest of the settings (values hashed, never shown); "" when empty."""
        if not self:
            return ""
        blob = json.dumps(self.as_librdkafka_dict(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_overrides(overrides: Mapping[str, str], prefix: str = "") -> Overrides:
    """``overrides`` (librdkafka property -> value) checked: the settings
    multikafka owns and Java-only names are refused, and librdkafka must
    accept the rest next to multikafka's reader defaults. ``prefix`` names
    them in errors (``"option kafka."`` gives ``option kafka.group.id``).
    Raises :class:`ValidationError` naming the key (never its value)."""
    checked: dict[str, str] = {}
    for raw, value in overrides.items():
        key = str(raw).strip().lower()
        field = f"{prefix}{key}"
        if not key:
            raise ValidationError(field, "names no librdkafka property")
        why = OWNED.get(key) or next(
            (w for p, w in OWNED_PREFIXES.items() if key.startswith(p)), None
        )
        if why is not None:
            raise ValidationError(field, f"a query cannot set this: {why}")
        if key in JAVA_ONLY:
            raise ValidationError(
                field, f"a Java Kafka client setting librdkafka does not have: {JAVA_ONLY[key]}"
            )
        if key.endswith("_cb") or key == "opaque":
            raise ValidationError(field, "takes a function; options can only give text")
        checked[key] = str(value)
    for key, value in checked.items():
        problem = _refused({key: value})
        if problem:
            raise ValidationError(f"{prefix}{key}", f"librdkafka refuses it: {problem}")
    if checked and (problem := _refused(checked)):
        raise ValidationError(
            f"{prefix}{', '.join(sorted(checked))}", f"librdkafka refuses them: {problem}"
        )
    return Overrides(checked)


def with_overrides(connection: Connection, overrides: Mapping[str, str]) -> Connection:
    """``connection`` with ``overrides`` over its properties (the query's
    setting wins over the stream document's); its properties' ``repr``
    hides every value."""
    if not overrides:
        return connection
    merged = {**connection.properties.as_librdkafka_dict(), **dict(overrides)}
    return Connection(connection.cluster, connection.bootstrap_servers, Overrides(merged))


def _refused(settings: Mapping[str, str]) -> str:
    """Why librdkafka refuses ``settings`` next to the reader defaults ("" if
    it takes them)."""
    config = {**READER_DEFAULTS, "group.id": READER_GROUP_ID, **settings}
    try:
        # No bootstrap servers: it connects to nothing; made and closed at once.
        Consumer(config, logger=_QUIET).close()
    except KafkaException as exc:
        text = exc.args[0].str() if exc.args else str(exc)
        return _VALUE.sub("value", text.removeprefix("Failed to create consumer: "))
    return ""


class _Quiet:
    """Where librdkafka's lines about the throw-away consumers of the checks
    (a producer setting, no brokers) go: nowhere."""

    def log(self, *args: object, **kwargs: object) -> None:
        pass


_QUIET = _Quiet()
