"""Options of the ``multikafka`` source, named like Spark's own Kafka source,
read into the :class:`~multikafka.reader_agent._options.ReadOptions` every
face of multikafka reads with (:func:`parse_options`).

What is Spark's own is done here: option names matched lower-cased, unknown
options refused (a typo such as ``startingOffset`` would otherwise silently
read from the default position), values read from text (whole numbers,
booleans, Spark's durations, positions), and the rules about which options
go together (an end only for batch queries, ``maxTriggerDelay`` only with
``minOffsetsPerTrigger``). The checks of the values themselves are
:class:`ReadOptions`', named in this source's words (:data:`NAMES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from multikafka.core._admission import DEFAULT_MAX_DELAY_S
from multikafka.core._positions import offsets_position, with_split_times
from multikafka.core._ranges import DEFAULT_MAX_RECORDS_PER_TASK
from multikafka.core.exceptions import ValidationError
from multikafka.reader_agent._options import ReadOptions, Vocabulary
from multikafka.reader_agent._overrides import check_overrides
from multikafka.reader_agent._payloads import PayloadDecoding
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


#: :class:`ReadOptions` field -> the option that sets it, as written.
_WRITTEN = {
    "stream": "stream",
    "coordinator": "coordinator",
    "tls_ca": "coordinatorTlsCa",
    "tls_cert": "coordinatorTlsCert",
    "tls_key": "coordinatorTlsKey",
    "token_file": "coordinatorTokenFile",
    "coordinator_timeout_s": "coordinatorTimeoutMs",
    "starting": "startingOffsets",
    "ending": "endingOffsets",
    "max_records_per_batch": "maxOffsetsPerTrigger",
    "min_records_per_batch": "minOffsetsPerTrigger",
    "max_batch_delay_s": "maxTriggerDelay",
    "fail_on_data_loss": "failOnDataLoss",
    "include_headers": "includeHeaders",
    "min_partitions": "minPartitions",
    "max_records_per_partition": "maxRecordsPerPartition",
    "query_id": "queryId",
    "commit_group_id": "commitGroupId",
    "decoding": "keyFormat, keySchema, valueFormat, valueSchema, mode",
    "kafka": "kafka",
}
#: How the Spark source names the fields of :class:`ReadOptions`: as its
#: options are written in messages, as ``option <name lower-cased>`` in
#: errors (decoding options name themselves: ``option valueFormat``).
NAMES = Vocabulary(
    written=_WRITTEN,
    labels={
        **{f: f"option {name.lower()}" for f, name in _WRITTEN.items() if f != "decoding"},
        # An unreadable token file has always been named as written.
        "token_file": "option coordinatorTokenFile",
    },
    absent={
        "resume_at": "a Spark query resumes from its checkpoint (the offset log), not an option",
        "parallelism": "not an option: the executors report Spark's task slots "
        "(multikafka.spark._slots); minPartitions asks for more tasks",
    },
)


def parse_options(
    options: Mapping[str, str], *, streaming: bool, parallelism: int = 0
) -> ReadOptions:
    """The read options of a ``multikafka`` query from Spark's options (names
    matched lower-cased; values may be any type Spark gives, read as text).
    ``streaming``: ``spark.readStream`` (default start latest, no end) or
    ``spark.read`` (earliest to latest); ``parallelism``: the tasks the
    session runs at once (0: unknown). Raises :class:`ValidationError`
    naming the option."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    for key in opts:
        if key not in KNOWN and not key.startswith(KAFKA_PREFIX):
            known = ", ".join(sorted(k for k in KNOWN if k != "path"))
            raise ValidationError(
                f"option {key}", f"unknown option for format multikafka; known: {known}"
            )
    coordinator = _required(opts, "coordinator")
    for ending in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
        if streaming and ending in opts:
            raise ValidationError(f"option {ending}", "only batch queries (spark.read) take an end")
    most = _optional_int(opts, "maxoffsetspertrigger")
    least = _optional_int(opts, "minoffsetspertrigger")
    if "maxtriggerdelay" in opts and least is None:
        raise ValidationError(
            "option maxtriggerdelay", "applies only with minOffsetsPerTrigger; set that too"
        )
    return ReadOptions(
        stream=_required(opts, "stream"),
        coordinator=coordinator,
        tls_ca=opts.get("coordinatortlsca", ""),
        tls_cert=opts.get("coordinatortlscert", ""),
        tls_key=opts.get("coordinatortlskey", ""),
        token_file=opts.get("coordinatortokenfile", ""),
        coordinator_timeout_s=_int(opts, "coordinatortimeoutms", 60_000, low=0) / 1000,
        starting=_position(opts, "starting", "latest" if streaming else "earliest"),
        ending=_position(opts, "ending", "latest"),
        max_records_per_batch=most,
        min_records_per_batch=least,
        max_batch_delay_s=_duration_s(opts, "maxtriggerdelay", DEFAULT_MAX_DELAY_S),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        min_partitions=_int(opts, "minpartitions", 1),
        max_records_per_partition=_int(
            opts, "maxrecordsperpartition", DEFAULT_MAX_RECORDS_PER_TASK
        ),
        parallelism=max(parallelism, 0),
        query_id=opts.get("queryid", ""),
        commit_group_id=opts.get("commitgroupid", ""),
        decoding=decoding_of(opts),
        kafka=check_overrides(
            {k[len(KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)},
            f"{NAMES.label('kafka')}.",
        ),
        names=NAMES,
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


def _int(opts: Mapping[str, str], key: str, default: int, *, low: int | None = None) -> int:
    """A whole number. ``low``: the least it may be, for the numbers only
    Spark writes (a time in ms); the others are :class:`ReadOptions`' to check."""
    value = _optional_int(opts, key)
    if value is None:
        return default
    if low is not None and value < low:
        raise ValidationError(f"option {key}", f"must be at least {low}, got {value}")
    return value


def _optional_int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValidationError(f"option {key}", f"must be a whole number, got {raw!r}") from None


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
        return Position(kind=Position.TIMESTAMP, timestamp_ms=ts)
    return offsets_position(
        opts.get(off_key, default), f"option {off_key}", ending=which == "ending"
    )
