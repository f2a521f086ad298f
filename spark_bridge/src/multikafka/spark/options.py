"""Options of the ``multikafka`` source, named like Spark's own Kafka source.

Unknown options are refused (a typo such as ``startingOffset`` would otherwise
silently read from the default position).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from multikafka.core import env
from multikafka.core.admission import DEFAULT_MAX_DELAY_S
from multikafka.core.exceptions import ValidationError
from multikafka.core.positions import offsets_position, with_split_times
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent.overrides import Overrides, check_overrides
from multikafka.reader_agent.payloads import PayloadDecoding
from multikafka.v1 import planner_pb2

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
    "minoffsetspertrigger": "no micro-batch until this many new records are available (or maxTriggerDelay passed)",
    "maxtriggerdelay": "with minOffsetsPerTrigger: start a batch anyway after this long, e.g. 15m (default), 30s, 500ms (a plain number is ms)",
    "startingoffsetsbytimestamp": 'JSON {"cluster": {"topic": {"0": ms}}} or {"cluster/topic/0": ms}: each split named starts at its first record at or after its time; others as startingOffsets/startingTimestamp say',
    "startingoffsetsbytimestampstrategy": "a split of startingOffsetsByTimestamp with no record at or after its time: error (default: the query fails) | latest (it starts at its latest offset)",
    "endingoffsetsbytimestamp": "batch only: JSON like startingOffsetsByTimestamp; each split named ends at its first record at or after its time (latest if none)",
    "kafka.*": "kafka.<librdkafka property>: a setting of the query's reader consumers on every cluster, e.g. kafka.fetch.max.bytes, kafka.client.rack (not group, commit, offset-reset, broker or security settings)",
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


#: Options that start with this are librdkafka settings (``kafka.fetch.max.bytes``).
KAFKA_PREFIX = "kafka."
#: Option names as written in the docs, for errors.
KNOWN_NAMES = {
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}
_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class SourceOptions:
    coordinator: str
    stream: str
    starting: planner_pb2.Position
    ending: planner_pb2.Position
    max_offsets_per_trigger: int | None = None
    #: minOffsetsPerTrigger (None: unset) and maxTriggerDelay in seconds.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_DELAY_S
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
    #: 0: unknown). Not an option: :func:`multikafka.spark.register` reads it.
    parallelism: int = 0
    #: How keys and values are decoded (keyFormat, valueFormat, their schemas, mode).
    decoding: PayloadDecoding = field(default_factory=PayloadDecoding)
    #: The ``kafka.*`` options: librdkafka settings of the query's reader
    #: consumers (values never shown).
    kafka: Overrides = field(default_factory=Overrides, repr=False)
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool, parallelism: int = 0
    ) -> SourceOptions:
        opts = {k.lower(): str(v) for k, v in options.items()}
        for key in opts:
            if key not in KNOWN and not key.startswith(KAFKA_PREFIX):
                known = ", ".join(sorted(k for k in KNOWN if k != "path"))
                raise ValidationError(
                    f"option {key}", f"unknown option for format multikafka; known: {known}"
                )
        coordinator = _required(opts, "coordinator")
        try:
            ConnectConfig.parse(coordinator)
        except ValidationError as exc:
            raise ValidationError("option coordinator", exc.problem) from None
        for ending in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if streaming and ending in opts:
                raise ValidationError(
                    f"option {ending}", "only batch queries (spark.read) take an end"
                )
        most = _int(opts, "maxoffsetspertrigger", None, low=1)
        least = _int(opts, "minoffsetspertrigger", None, low=1)
        if least is not None and most is not None and least > most:
            raise ValidationError(
                "option minoffsetspertrigger",
                f"{least} is above maxOffsetsPerTrigger ({most}): the minimum must not exceed the maximum",
            )
        if "maxtriggerdelay" in opts and least is None:
            raise ValidationError(
                "option maxtriggerdelay", "applies only with minOffsetsPerTrigger; set that too"
            )
        return cls(
            coordinator=coordinator,
            stream=_required(opts, "stream"),
            starting=_position(opts, "starting", "latest" if streaming else "earliest"),
            ending=_position(opts, "ending", "latest"),
            max_offsets_per_trigger=most,
            min_offsets_per_trigger=least,
            max_trigger_delay_s=_duration_s(opts, "maxtriggerdelay", DEFAULT_MAX_DELAY_S),
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
            kafka=check_overrides(
                {k[len(KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)},
                f"option {KAFKA_PREFIX}",
            ),
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


def _duration_s(opts: Mapping[str, str], key: str, default_s: float) -> float:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``, ``2h``,
    ``1d``; a plain number is milliseconds), in seconds."""
    raw = opts.get(key)
    if raw is None:
        return default_s
    match = _DURATION.fullmatch(raw.strip().lower())
    if match is None:
        raise ValidationError(
            f"option {key}",
            f"must be a whole number with a unit (us, ms, s, m, min, h, d), e.g. 15m, 30s or "
            f"500ms (a plain number is ms), got {raw!r}",
        )
    return int(match.group(1)) * _UNIT_S[match.group(2) or "ms"]


def _position(opts: Mapping[str, str], which: str, default: str) -> planner_pb2.Position:
    position = _base_position(opts, which, default)
    by_time = f"{which}offsetsbytimestamp"
    strategy_key = f"{which}offsetsbytimestampstrategy"
    if by_time not in opts:
        if strategy_key in opts:
            raise ValidationError(
                f"option {strategy_key}", f"applies only with {KNOWN_NAMES[by_time]}; set that too"
            )
        return position
    return with_split_times(
        position,
        opts[by_time],
        # As Spark: an end with no record at or after its time is the latest offset.
        opts.get(strategy_key, "error") if which == "starting" else "latest",
        field=f"option {by_time}",
        strategy_field=f"option {strategy_key}",
        offsets_field=f"{which}Offsets",
    )


def _base_position(opts: Mapping[str, str], which: str, default: str) -> planner_pb2.Position:
    ts_key, off_key = f"{which}timestamp", f"{which}offsets"
    if ts_key in opts:
        ts = _int(opts, ts_key, 0, low=0)
        return Position(kind=Position.TIMESTAMP, timestamp_ms=ts or 0)
    return offsets_position(
        opts.get(off_key, default), f"option {off_key}", ending=which == "ending"
    )
