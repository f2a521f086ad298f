"""Parse and validate stream documents.

The same validation guards the admin API (a bad document is ``INVALID_ARGUMENT``)
and the etcd watch (a bad value written directly is ignored and the last good
version kept). Every error names the field to fix, e.g.
``clusters.west.bootstrap_servers: required``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from multikafka.core._kafka_config import ISOLATION_LEVELS
from multikafka.core._references import check_references
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import ValidationError, shown
from multikafka.core.mm2 import Mm2Mirror, ReplicationPolicy, SyncsLocation, mirror_topic_problems
from multikafka.core.model import (
    DEFAULT_MARGIN_MS,
    STRATEGY_NAMES,
    AutoFailover,
    ClusterSpec,
    ClusterState,
    FailoverStrategy,
    StartingPosition,
    StartKind,
    StoppingPosition,
    StreamSpec,
)

_E = TypeVar("_E", bound=enum.Enum)

#: Longest stream or cluster name.
MAX_NAME = 128
#: A stream document is refused from this size on (bytes of its JSON).
MAX_DOCUMENT_BYTES = 1024 * 1024
#: Longest identifier a request may carry (query, agent, consumer group).
MAX_ID = 255
#: Largest time or duration in milliseconds (int64, as in the protos and Kafka).
MAX_MS = 2**63 - 1
#: A stream document is at most this many levels deep (stream, clusters,
#: cluster, properties, value); far deeper input is refused before it is walked.
MAX_DEPTH = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}
#: ``topic/partition``, the key of a cluster's stopping offsets.
_TOPIC_PARTITION = re.compile(r"^(.+)/(0|[1-9][0-9]*)$")

#: Properties multikafka sets itself; a document may not override them.
_RESERVED_PROPERTIES = {
    "bootstrap.servers": "use the cluster's bootstrap_servers field",
    "enable.auto.commit": "multikafka commits offsets only after Spark commits a batch",
    "enable.auto.offset.store": "multikafka commits offsets only after Spark commits a batch",
}

_RETENTION_KEYS = ("removed_cluster_retention", "removed_cluster_retention_ms")
_STREAM_FIELDS = {"name", "clusters", "auto_failover", *_RETENTION_KEYS}
_CLUSTER_FIELDS = {
    "bootstrap_servers",
    "topics",
    "properties",
    "state",
    "starting",
    "stopping",
    "mm2",
}
_MM2_FIELDS = {
    "source",
    "source_alias",
    "target_alias",
    "replication_policy",
    "offset_syncs_topic_location",
}
_STOPPING_FIELDS = {"offsets", "timestamp"}
_FAILOVER_FIELDS = {
    "standby",
    "unreachable_after_ms",
    "unreachable_after",
    "strategy",
    "margin_ms",
    "margin",
}


def validate_name(value: object, field: str) -> str:
    """A stream or cluster name: letters, digits, ``.``, ``_``, ``-`` (no ``/``)."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {_type(value)}")
    if len(value) > MAX_NAME:
        raise ValidationError(
            field,
            f"is not a valid name: it is {len(value):,} characters long; "
            f"names are at most {MAX_NAME} characters",
        )
    if not _NAME.fullmatch(value):
        raise ValidationError(
            field,
            f"{shown(value)} is not a valid name: use 1-{MAX_NAME} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return value


def validate_id(value: str, field: str, *, required: bool = False) -> str:
    """An identifier a request carries (query id, agent id, consumer group):
    any text up to :data:`MAX_ID` characters (at least one if ``required``)."""
    if required and not value:
        raise ValidationError(field, "required")
    if len(value) > MAX_ID:
        raise ValidationError(
            field, f"is {len(value):,} characters long; at most {MAX_ID} are allowed"
        )
    return value


def parse_duration_ms(value: object, field: str) -> int:
    """``1500``, ``"1500ms"``, ``"30s"``, ``"2m"``, ``"1h"``, ``"7d"`` -> milliseconds."""
    if isinstance(value, bool):
        raise ValidationError(field, "must be a duration such as 30s or 500ms, got a boolean")
    ms: int | None = None
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        m = _DURATION.fullmatch(value.strip())
        if m:
            ms = int(m.group(1)) * _DURATION_MS[m.group(2)]
    if ms is not None:
        if ms < 0:
            raise ValidationError(field, "must not be negative")
        return validate_ms(ms, field)
    raise ValidationError(field, f"must be a duration such as 30s or 500ms, got {shown(value)}")


def validate_ms(value: int, field: str) -> int:
    """A time or duration in milliseconds that fits int64."""
    if value > MAX_MS:
        raise ValidationError(field, f"is {value:,} ms; at most {MAX_MS:,} (int64) is allowed")
    return value


def parse_stream_json(text: str | bytes, *, expected_name: str | None = None) -> StreamSpec:
    """Parse a stream document from JSON text; see :func:`parse_stream`."""
    too_deep = ValidationError("", f"nested more than {MAX_DEPTH} levels deep")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise too_deep from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError("", f"not valid JSON: {exc}") from exc
    if _deeper_than(doc, MAX_DEPTH):
        raise too_deep
    return parse_stream(doc, expected_name=expected_name)


def _deeper_than(doc: object, limit: int) -> bool:
    """Whether ``doc`` nests lists and objects more than ``limit`` levels."""
    level = [doc]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, (dict, list)) for node in level)


def parse_stream(doc: object, *, expected_name: str | None = None) -> StreamSpec:
    """Validate a decoded stream document and return the :class:`StreamSpec`.

    ``expected_name`` is the name implied by where the document is stored; the
    document's own ``name`` must match it.
    """
    obj = _object(doc, "", _STREAM_FIELDS)
    name = validate_name(_required(obj, "name", ""), "name")
    if expected_name is not None and name != expected_name:
        raise ValidationError(
            "name", f"is {shown(name)} but the document is stored as {shown(expected_name)}"
        )
    clusters_doc = _object(_required(obj, "clusters", ""), "clusters")
    if not clusters_doc:
        raise ValidationError("clusters", "must name at least one cluster")
    clusters = {
        validate_name(cid, f"clusters.{cid}"): _parse_cluster(cdoc, cid)
        for cid, cdoc in clusters_doc.items()
    }
    for cid, cluster in clusters.items():
        if cluster.mm2 is not None:
            _check_mirror(cid, cluster.mm2, cluster.topics, clusters)
    auto = None
    if obj.get("auto_failover") is not None:
        auto = _parse_auto_failover(obj["auto_failover"], clusters)
    return StreamSpec(
        name=name,
        clusters=clusters,
        auto_failover=auto,
        removed_cluster_retention_ms=_parse_retention(obj),
    )


def _parse_retention(obj: Mapping[str, Any]) -> int | None:
    """``removed_cluster_retention`` (a duration) or ``..._ms``; not both."""
    given = [k for k in _RETENTION_KEYS if obj.get(k) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise ValidationError(
            given[1], f"give either {given[0]} or {given[1]}, not both (they set the same window)"
        )
    return parse_duration_ms(obj[given[0]], given[0])


def _parse_cluster(doc: object, cid: str) -> ClusterSpec:
    path = f"clusters.{cid}"
    obj = _object(doc, path, _CLUSTER_FIELDS)
    bootstrap = _parse_bootstrap(
        _required(obj, "bootstrap_servers", path), f"{path}.bootstrap_servers"
    )
    topics = _parse_topics(_required(obj, "topics", path), f"{path}.topics")
    properties = _parse_properties(obj.get("properties", {}), f"{path}.properties")
    state = _parse_state(obj.get("state", "ACTIVE"), f"{path}.state")
    starting = None
    if obj.get("starting") is not None:
        starting = parse_starting(obj["starting"], f"{path}.starting")
    stopping = None
    if obj.get("stopping") is not None:
        stopping = parse_stopping(obj["stopping"], f"{path}.stopping", topics)
    mm2 = None
    if obj.get("mm2") is not None:
        mm2 = _parse_mm2(obj["mm2"], f"{path}.mm2", cid)
    return ClusterSpec(bootstrap, topics, properties, state, starting, stopping, mm2)


def _parse_mm2(doc: object, path: str, cid: str) -> Mm2Mirror:
    """A cluster's ``mm2`` block (checked against the other clusters by
    :func:`_check_mirror`)."""
    obj = _object(doc, path, _MM2_FIELDS)
    source = validate_name(_required(obj, "source", path), f"{path}.source")
    source_alias = validate_name(obj.get("source_alias", source), f"{path}.source_alias")
    target_alias = validate_name(obj.get("target_alias", cid), f"{path}.target_alias")
    policy = _choice(
        obj.get("replication_policy", "default"), ReplicationPolicy, f"{path}.replication_policy"
    )
    location = _choice(
        obj.get("offset_syncs_topic_location", "source"),
        SyncsLocation,
        f"{path}.offset_syncs_topic_location",
    )
    return Mm2Mirror(source, source_alias, target_alias, policy, location)


def _check_mirror(
    cid: str, mirror: Mm2Mirror, topics: tuple[str, ...], clusters: Mapping[str, ClusterSpec]
) -> None:
    """A mirror's source is another cluster of the stream, and its topics are
    the remote topics of the source's."""
    path = f"clusters.{cid}.mm2"
    source = mirror.source
    if source == cid:
        raise ValidationError(
            f"{path}.source", "names this cluster itself; name the cluster MM2 copies from"
        )
    if source not in clusters:
        raise ValidationError(
            f"{path}.source",
            f"names {shown(source)}, which is not a cluster of this stream "
            f"({', '.join(sorted(clusters))}); add the source cluster too",
        )
    problems = mirror_topic_problems(
        mirror.replication_policy, mirror.source_alias, clusters[source].topics, topics
    )
    if problems:
        raise ValidationError(
            f"clusters.{cid}.topics",
            f"do not follow the mm2 block: {'; '.join(problems)}",
        )


def _choice(value: object, kind: type[_E], field: str) -> _E:
    """One of an enum's values, given as its text."""
    allowed = ", ".join(str(e.value) for e in kind)
    if isinstance(value, str):
        for e in kind:
            if e.value == value:
                return e
    raise ValidationError(field, f"must be one of {allowed}, got {shown(value)}")


def _parse_bootstrap(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string like 'host:9092', got {_type(value)}")
    servers = [s.strip() for s in value.split(",") if s.strip()]
    if not servers:
        raise ValidationError(field, "must name at least one broker as 'host:port'")
    for server in servers:
        host_port = server.split("://", 1)[-1]
        m = _HOST_PORT.fullmatch(host_port)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ValidationError(
                field, f"{shown(server)} is not 'host:port' with a port in 1-65535"
            )
    return ",".join(servers)


def _parse_topics(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValidationError(field, f"must be a list of topic names, got {_type(value)}")
    if not value:
        raise ValidationError(field, "must name at least one topic")
    seen: set[str] = set()
    for i, topic in enumerate(value):
        if not isinstance(topic, str):
            raise ValidationError(f"{field}[{i}]", f"must be a string, got {_type(topic)}")
        if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise ValidationError(
                f"{field}[{i}]",
                f"{shown(topic)} is not a valid Kafka topic name (1-249 of letters, digits, '.', '_', '-')",
            )
        if topic in seen:
            raise ValidationError(f"{field}[{i}]", f"topic {shown(topic)} is listed twice")
        seen.add(topic)
    return tuple(value)


def _parse_properties(value: object, field: str) -> Properties:
    obj = _object(value, field)
    props: dict[str, str] = {}
    for key, val in obj.items():
        _text(key, f"{field}.{key}", "key")
        if key in _RESERVED_PROPERTIES:
            raise ValidationError(f"{field}.{key}", f"may not be set: {_RESERVED_PROPERTIES[key]}")
        if isinstance(val, bool):
            props[key] = "true" if val else "false"
        elif isinstance(val, (str, int, float)):
            props[key] = _text(str(val), f"{field}.{key}", "value")
            check_references(props[key], f"{field}.{key}")
        else:
            raise ValidationError(
                f"{field}.{key}", f"must be a string, number or boolean, got {_type(val)}"
            )
    level = props.get("isolation.level")
    if level is not None and level not in ISOLATION_LEVELS:
        # The coordinator plans the cluster by it: refused here, not by
        # every reader's consumer later.
        raise ValidationError(
            f"{field}.isolation.level",
            f"{shown(level)} is not an isolation level: use {' or '.join(ISOLATION_LEVELS)}",
        )
    return Properties(props)


def _parse_state(value: object, field: str) -> ClusterState:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {_type(value)}")
    try:
        return ClusterState(value.upper())
    except ValueError:
        allowed = ", ".join(s.value for s in ClusterState)
        raise ValidationError(
            field, f"unknown state {shown(value)}; use one of {allowed}"
        ) from None


def parse_starting(value: object, field: str) -> StartingPosition:
    """``"earliest"``, ``"latest"`` or ``{"timestamp": <ms>}``."""
    if isinstance(value, str) and value.lower() in ("earliest", "latest"):
        return StartingPosition(StartKind(value.lower()))
    if isinstance(value, dict) and set(value) == {"timestamp"}:
        ts = value["timestamp"]
        if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0:
            return StartingPosition(StartKind.TIMESTAMP, validate_ms(ts, f"{field}.timestamp"))
    raise ValidationError(
        field,
        f'must be "earliest", "latest" or {{"timestamp": <ms since epoch>}}, got {shown(value)}',
    )


def parse_stopping(value: object, field: str, topics: tuple[str, ...]) -> StoppingPosition:
    """``{"offsets": {"<topic>/<partition>": <offset>, ...}}`` (of the
    cluster's ``topics``) or ``{"timestamp": <ms>}``."""
    shape = (
        'must be {"offsets": {"<topic>/<partition>": <offset>, ...}} or '
        '{"timestamp": <ms since epoch>}'
    )
    if not isinstance(value, dict):
        raise ValidationError(field, f"{shape}, got {_type(value)}")
    _object(value, field, _STOPPING_FIELDS)
    if len(value) != 1:
        raise ValidationError(field, f"{shape}: give exactly one of offsets or timestamp")
    if "timestamp" in value:
        ts = value["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise ValidationError(
                f"{field}.timestamp",
                f"must be milliseconds since the epoch (>= 0), got {shown(ts)}",
            )
        return StoppingPosition(timestamp_ms=validate_ms(ts, f"{field}.timestamp"))
    offsets_doc = _object(value["offsets"], f"{field}.offsets")
    if not offsets_doc:
        raise ValidationError(
            f"{field}.offsets", "must name at least one partition (or leave out stopping)"
        )
    stops: dict[tuple[str, int], int] = {}
    for key, offset in offsets_doc.items():
        where = f"{field}.offsets.{key}"
        m = _TOPIC_PARTITION.fullmatch(key)
        if m is None or int(m.group(2)) >= 2**31:
            raise ValidationError(
                where, "keys are '<topic>/<partition>' with a partition like 0, 7, 12"
            )
        topic, partition = m.group(1), int(m.group(2))
        if topic not in topics:
            raise ValidationError(
                where,
                f"topic {shown(topic)} is not one of this cluster's topics "
                f"({', '.join(topics)}); add it to topics or fix the key",
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(
                where, f"must be an offset (a whole number >= 0), got {shown(offset)}"
            )
        if offset > MAX_MS:
            raise ValidationError(where, f"is {offset:,}; offsets fit int64 (at most {MAX_MS:,})")
        stops[(topic, partition)] = offset
    return StoppingPosition(offsets=tuple(sorted(stops.items())))


def _parse_auto_failover(doc: object, clusters: Mapping[str, ClusterSpec]) -> AutoFailover:
    path = "auto_failover"
    obj = _object(doc, path, _FAILOVER_FIELDS)
    standby = validate_name(_required(obj, "standby", path), f"{path}.standby")
    if standby not in clusters:
        raise ValidationError(
            f"{path}.standby", f"names {shown(standby)}, which is not a cluster of this stream"
        )
    window_key = "unreachable_after" if "unreachable_after" in obj else "unreachable_after_ms"
    window = parse_duration_ms(_required(obj, window_key, path), f"{path}.{window_key}")
    if window <= 0:
        raise ValidationError(f"{path}.{window_key}", "must be longer than zero")
    strategy_raw = obj.get("strategy", "timestamp")
    try:
        strategy = FailoverStrategy(strategy_raw)
    except ValueError:
        raise ValidationError(
            f"{path}.strategy", f"unknown strategy {shown(strategy_raw)}; use {STRATEGY_NAMES}"
        ) from None
    if strategy is FailoverStrategy.MM2 and clusters[standby].mm2 is None:
        raise ValidationError(
            f"{path}.strategy",
            f"mm2 needs the standby {shown(standby)} to say whose MirrorMaker 2 replica it is "
            "(its mm2 block); add one, or use timestamp",
        )
    margin_key = "margin" if "margin" in obj else "margin_ms"
    margin = parse_duration_ms(obj.get(margin_key, DEFAULT_MARGIN_MS), f"{path}.{margin_key}")
    return AutoFailover(standby, window, strategy, margin)


def _text(value: str, field: str, what: str) -> str:
    """``value`` if it is text a Kafka client can take: Unicode without lone
    surrogates (JSON's ``\\udc80`` escapes decode to them) and without NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            field, f"the {what} is not Unicode text (it holds a lone surrogate such as \\udc80)"
        ) from None
    if "\x00" in value:
        raise ValidationError(field, f"the {what} holds a NUL character")
    return value


def _object(value: object, field: str, allowed: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(field, f"must be an object, got {_type(value)}")
    if allowed is not None:
        for key in value:
            if key not in allowed:
                where = f"{field}.{key}" if field else key
                raise ValidationError(
                    where, f"unknown field; allowed: {', '.join(sorted(allowed))}"
                )
    return value


def _required(obj: Mapping[str, Any], key: str, path: str) -> object:
    if key not in obj or obj[key] is None:
        raise ValidationError(f"{path}.{key}" if path else key, "required")
    return obj[key]


def _type(value: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
