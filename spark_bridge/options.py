"""Options of the ``multikafka`` source, named like Spark's own Kafka source.

Unknown options are refused (a typo such as ``startingOffset`` would otherwise
silently read from the default position).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from multikafka_core import env
from multikafka_core import offsets as ov
from multikafka_core.exceptions import ValidationError
from multikafka_core.payloads import PayloadDecoding
from multikafka_core.transport import ConnectConfig
from multikafka_core.v1 import planner_pb2

Position = planner_pb2.Position

#: option (lower case) -> what it does, for the error on unknown options.
KNOWN = {
    "coordinator": "host:port of the multikafka coordinator, or several comma-separated (required)",
    "stream": "logical stream name (required)",
    "startingoffsets": 'earliest | latest | JSON {"cluster/topic/partition": offset} (-2 earliest, -1 latest)',
    "startingtimestamp": "start at the first record at or after this time (ms since epoch)",
    "endingoffsets": "batch only: latest | JSON like startingOffsets",
    "endingtimestamp": "batch only: end at the first record at or after this time (ms since epoch)",
    "maxoffsetspertrigger": "most records per micro-batch, split across splits by backlog",
    "failondataloss": "true (default): fail when records are gone; false: skip and count",
    "includeheaders": "true: add the headers column",
    "minpartitions": "at least this many Spark partitions per batch (when there are that many records)",
    "maxrecordsperpartition": "at most this many records per Spark partition (default 100000)",
    "queryid": "stable id of this query at the coordinator (default: one per run)",
    "commitgroupid": "also commit each batch's end offsets to this consumer group on every cluster",
    "coordinatortimeoutms": "how long planner calls retry an unavailable coordinator (default 60000)",
    "coordinatortlsca": "PEM file of the CA that signed the coordinator's TLS certificate (TLS)",
    "coordinatortlscert": "PEM file of a client certificate for the coordinator (mutual TLS)",
    "coordinatortlskey": "PEM file of that client certificate's key",
    "coordinatortokenfile": "file holding the coordinator's reader token (default: env MULTIKAFKA_READER_TOKEN)",
    "keyformat": "raw (default: binary) | string (UTF-8) | json (a struct of keySchema)",
    "keyschema": "keyFormat json: the key's fields as Spark DDL, e.g. 'id long, name string'",
    "valueformat": "raw (default: binary) | string (UTF-8) | json (a struct of valueSchema)",
    "valueschema": "valueFormat json: the value's fields as Spark DDL, e.g. 'id long, tags array<string>'",
    "mode": "records that do not decode: PERMISSIVE (default; null, bytes in _corrupt_key/_corrupt_value) | DROPMALFORMED | FAILFAST",
    "path": "ignored",
}


@dataclass(frozen=True)
class SourceOptions:
    coordinator: str
    stream: str
    starting: planner_pb2.Position
    ending: planner_pb2.Position
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int = 1
    max_records_per_partition: int = 100_000
    query_id: str = ""
    commit_group_id: str = ""
    coordinator_timeout_s: float = 60.0
    coordinator_tls_ca: str = ""
    coordinator_tls_cert: str = ""
    coordinator_tls_key: str = ""
    coordinator_token_file: str = ""
    #: Tasks the Spark session runs at once (``spark.default.parallelism``;
    #: 0: unknown). Not an option: :func:`spark_bridge.register` reads it.
    parallelism: int = 0
    #: How keys and values are decoded (keyFormat, valueFormat, their schemas, mode).
    decoding: PayloadDecoding = field(default_factory=PayloadDecoding)
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool, parallelism: int = 0
    ) -> SourceOptions:
        opts = {k.lower(): str(v) for k, v in options.items()}
        for key in opts:
            if key not in KNOWN:
                known = ", ".join(sorted(k for k in KNOWN if k != "path"))
                raise ValidationError(
                    f"option {key}", f"unknown option for format multikafka; known: {known}"
                )
        coordinator = _required(opts, "coordinator")
        try:
            ConnectConfig.parse(coordinator)
        except ValidationError as exc:
            raise ValidationError("option coordinator", exc.problem) from None
        for ending in ("endingoffsets", "endingtimestamp"):
            if streaming and ending in opts:
                raise ValidationError(
                    f"option {ending}", "only batch queries (spark.read) take an end"
                )
        return cls(
            coordinator=coordinator,
            stream=_required(opts, "stream"),
            starting=_position(opts, "starting", "latest" if streaming else "earliest"),
            ending=_position(opts, "ending", "latest"),
            max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", None, low=1),
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            include_headers=_bool(opts, "includeheaders", False),
            min_partitions=_int(opts, "minpartitions", 1, low=1) or 1,
            max_records_per_partition=_int(opts, "maxrecordsperpartition", 100_000, low=1)
            or 100_000,
            query_id=opts.get("queryid", ""),
            commit_group_id=opts.get("commitgroupid", ""),
            coordinator_timeout_s=(_int(opts, "coordinatortimeoutms", 60_000, low=0) or 0) / 1000,
            coordinator_tls_ca=opts.get("coordinatortlsca", ""),
            coordinator_tls_cert=opts.get("coordinatortlscert", ""),
            coordinator_tls_key=opts.get("coordinatortlskey", ""),
            coordinator_token_file=opts.get("coordinatortokenfile", ""),
            parallelism=max(parallelism, 0),
            decoding=decoding_of(opts),
        )


def decoding_of(options: Mapping[str, str]) -> PayloadDecoding:
    """The decoding options (keys matched lower-cased), checked."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    return PayloadDecoding.parse(
        key_format=opts.get("keyformat", "raw"),
        key_schema=opts.get("keyschema", ""),
        value_format=opts.get("valueformat", "raw"),
        value_schema=opts.get("valueschema", ""),
        mode=opts.get("mode", "PERMISSIVE"),
    )


def connect_config(o: SourceOptions) -> ConnectConfig:
    """How the query reaches the coordinator, files read now (on the driver):
    the CA, client certificate and reader token then travel inside each
    task, so executors need no file of their own."""
    return ConnectConfig.from_files(
        o.coordinator,
        ca=o.coordinator_tls_ca,
        cert=o.coordinator_tls_cert,
        key=o.coordinator_tls_key,
        token=env.secret(
            env.READER_TOKEN,
            env.READER_TOKEN_FILE,
            file=o.coordinator_token_file,
            what="option coordinatorTokenFile",
        ),
    )


def _required(opts: Mapping[str, str], key: str) -> str:
    value = opts.get(key, "").strip()
    if not value:
        raise ValidationError(f"option {key}", f"required: {KNOWN[key]}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValidationError(f"option {key}", f"must be true or false, got {raw!r}")


def _int(opts: Mapping[str, str], key: str, default: int | None, *, low: int) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"option {key}", f"must be a whole number, got {raw!r}") from None
    if value < low:
        raise ValidationError(f"option {key}", f"must be at least {low}, got {value}")
    return value


def _position(opts: Mapping[str, str], which: str, default: str) -> planner_pb2.Position:
    ts_key, off_key = f"{which}timestamp", f"{which}offsets"
    if ts_key in opts:
        ts = _int(opts, ts_key, 0, low=0)
        return Position(kind=Position.TIMESTAMP, timestamp_ms=ts or 0)
    raw = opts.get(off_key, default).strip()
    if raw.lower() == "earliest":
        if which == "ending":
            raise ValidationError(
                f"option {off_key}", "earliest is not a valid end; use latest or JSON"
            )
        return Position(kind=Position.EARLIEST)
    if raw.lower() == "latest":
        return Position(kind=Position.LATEST)
    if raw.startswith("{"):
        offsets = ov.parse_json(raw, f"option {off_key}", allow_special=True)
        if not offsets:
            raise ValidationError(f"option {off_key}", "names no split")
        if which == "ending":
            early = sorted(s for s, o in offsets.items() if o == -2)
            if early:
                raise ValidationError(
                    f"option {off_key}.{early[0]}",
                    "-2 (earliest) is not a valid end; use -1 or an offset",
                )
        fallback = Position.EARLIEST if which == "starting" else Position.LATEST
        return Position(kind=Position.SPECIFIC, offsets=offsets, fallback=fallback)
    raise ValidationError(
        f"option {off_key}",
        f"must be earliest, latest or JSON like {json.dumps({'cluster/topic/0': 42})}, got {raw!r}",
    )
