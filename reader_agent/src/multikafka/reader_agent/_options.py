"""What a query asks of reading, in one model for both faces.

The Spark source's options (``multikafka.spark._options``: ``startingOffsets``,
``maxOffsetsPerTrigger``, ...) and the standalone reader's arguments
(``multikafka.Reader``: ``starting_offsets``, ``max_records_per_batch``, ...)
are two spellings of the same settings. Each face turns what its user wrote
into a :class:`ReadOptions`; the checks they share run here, once, and name
the field the way that face's user wrote it (a :class:`Vocabulary`). What is
left in a face is reading its own input: Spark's option strings, durations
and booleans; the Reader's Python values and its resumable positions.

It lives in the reader agent's layer, the lowest that holds what it carries
(:class:`~multikafka.reader_agent._payloads.PayloadDecoding`,
:class:`~multikafka.reader_agent._overrides.Overrides`); both faces sit above
it and never import each other. It pickles (Spark ships the stream reader,
options included, to its Python workers), and its ``repr`` never shows the
``kafka`` settings' values.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field

from multikafka.core import env
from multikafka.core._admission import DEFAULT_MAX_DELAY_S, MinRecordsGate
from multikafka.core._ranges import DEFAULT_MAX_RECORDS_PER_TASK
from multikafka.core.exceptions import ValidationError
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent._overrides import Overrides
from multikafka.reader_agent._payloads import PayloadDecoding
from multikafka.v1 import planner_pb2

Position = planner_pb2.Position


@dataclass(frozen=True)
class Vocabulary:
    """How one face names the fields of :class:`ReadOptions` to its users:
    ``written`` as they write them (``maxOffsetsPerTrigger``,
    ``max_records_per_batch``), which messages use when they mention another
    field; ``labels`` as its errors name them (``ValidationError.field``:
    ``option maxoffsetspertrigger``; a field without a label is named as
    written). ``absent``: the fields the face has no setting for, and why.
    Every field is in exactly one of ``written`` and ``absent``
    (``tests/unit/test_read_options.py`` holds both faces to it)."""

    written: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)
    absent: Mapping[str, str] = field(default_factory=dict)

    def name(self, field_name: str) -> str:
        """``field_name`` as the face's users write it."""
        return self.written.get(field_name, field_name)

    def label(self, field_name: str) -> str:
        """``field_name`` as the face's errors name it."""
        return self.labels.get(field_name) or self.name(field_name)


#: The model's own names: errors of a ReadOptions made directly.
OWN_NAMES = Vocabulary(written={})


def _latest() -> planner_pb2.Position:
    return Position(kind=Position.LATEST)


@dataclass(frozen=True)
class ReadOptions:
    """Everything a query asks of reading one logical stream. Made by the
    Spark source from its options and by :class:`multikafka.Reader` from its
    arguments; checked when made (``names``: the face's :class:`Vocabulary`,
    for its errors; not kept)."""

    #: The logical stream to read (required).
    stream: str
    #: ``host:port`` of the coordinator, or of each replica, comma-separated.
    coordinator: str
    #: PEM file (read where the options are turned into a connection, the
    #: Spark driver) of the CA that signed the coordinator's certificate
    #: (TLS); empty: ``MULTIKAFKA_TLS_CA``, else no TLS.
    tls_ca: str = ""
    #: PEM files of a client certificate and its key (mutual TLS).
    tls_cert: str = ""
    tls_key: str = ""
    #: File holding the coordinator's reader token; empty:
    #: ``MULTIKAFKA_READER_TOKEN`` or ``MULTIKAFKA_READER_TOKEN_FILE``.
    token_file: str = ""
    #: How long calls retry an unavailable coordinator (a leader takeover).
    coordinator_timeout_s: float = 60.0
    #: Where the query starts: earliest, latest, offsets, a time, per-split
    #: times; the coordinator resolves it.
    starting: planner_pb2.Position = field(default_factory=_latest)
    #: A position a Reader gave (split -> next offset), resumed as it is:
    #: ``starting`` is then not used. None: start at ``starting``. Not shown
    #: in ``repr`` (it may name 100,000 splits).
    resume_at: Mapping[str, int] | None = field(default=None, repr=False)
    #: Where a bounded read (a Spark batch query) ends: latest, offsets, a
    #: time, per-split times. Streams do not use it.
    ending: planner_pb2.Position = field(default_factory=_latest)
    #: Most records per micro-batch, shared across splits by backlog (None: no limit).
    max_records_per_batch: int | None = None
    #: No micro-batch until this many records are available (None: no minimum)...
    min_records_per_batch: int | None = None
    #: ... unless this long passed since the last one started (seconds).
    max_batch_delay_s: float = DEFAULT_MAX_DELAY_S
    #: True: fail when records are gone; False: skip them and count.
    fail_on_data_loss: bool = True
    #: Add the ``headers`` column.
    include_headers: bool = False
    #: At least this many tasks per micro-batch (when it has that many records).
    min_partitions: int = 1
    #: At most this many records per task.
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_TASK
    #: Tasks the reader runs at once, which micro-batches are planned for
    #: (0: unknown, one task per split with records).
    parallelism: int = 0
    #: A stable id of the query at the coordinator ("": a new one per run).
    query_id: str = ""
    #: Also commit each micro-batch's end offsets to this consumer group on
    #: every cluster ("": none).
    commit_group_id: str = ""
    #: How keys and values are decoded (formats, schemas, mode).
    decoding: PayloadDecoding = field(default_factory=PayloadDecoding)
    #: librdkafka settings of the query's reader consumers on every cluster,
    #: checked (:func:`~multikafka.reader_agent._overrides.check_overrides`);
    #: values never shown.
    kafka: Overrides = field(default_factory=Overrides, repr=False)
    #: How the face that makes these options names their fields in errors.
    names: InitVar[Vocabulary | None] = None

    @property
    def isolation_level(self) -> str:
        """The query's ``isolation.level`` ("": each cluster's own): the
        coordinator plans a cluster read committed to its last stable offsets."""
        return self.kafka.get("isolation.level", "")

    def __post_init__(self, names: Vocabulary | None) -> None:
        """The checks both faces share: each refusal names the field as the
        face's user wrote it."""
        n = names or OWN_NAMES
        if not self.stream:
            raise ValidationError(n.label("stream"), "required: the logical stream to read")
        try:
            ConnectConfig.parse(self.coordinator)
        except ValidationError as exc:
            raise ValidationError(n.label("coordinator"), exc.problem) from None
        most, least = self.max_records_per_batch, self.min_records_per_batch
        _at_least(n, "max_records_per_batch", most, 1)
        _at_least(n, "min_records_per_batch", least, 1)
        if least is not None and most is not None and least > most:
            raise ValidationError(
                n.label("min_records_per_batch"),
                f"{least} is above {n.name('max_records_per_batch')} ({most}): "
                "the minimum must not exceed the maximum",
            )
        if self.max_batch_delay_s < 0:
            raise ValidationError(
                n.label("max_batch_delay_s"), f"must not be negative, got {self.max_batch_delay_s}"
            )
        _at_least(n, "min_partitions", self.min_partitions, 1)
        _at_least(n, "max_records_per_partition", self.max_records_per_partition, 1)
        _at_least(n, "parallelism", self.parallelism, 0)

    def query_id_for_run(self) -> str:
        """The id this run of the query has at the coordinator:
        :attr:`query_id`, else a new one."""
        return self.query_id or f"{self.stream}-{uuid.uuid4().hex[:12]}"

    def min_records_gate(self) -> MinRecordsGate | None:
        """A new gate holding micro-batches back until
        :attr:`min_records_per_batch` records are available (None: no minimum)."""
        if not self.min_records_per_batch:
            return None
        return MinRecordsGate(self.min_records_per_batch, self.max_batch_delay_s)

    def connect_config(self, names: Vocabulary | None = None) -> ConnectConfig:
        """How the query reaches the coordinator, its files read now: the CA,
        client certificate and reader token then travel inside each task, so
        executors need no file of their own. ``names``: the face's, for an
        unreadable token file."""
        return ConnectConfig.from_files(
            self.coordinator,
            ca=self.tls_ca,
            cert=self.tls_cert,
            key=self.tls_key,
            token=env.secret(
                env.READER_TOKEN,
                env.READER_TOKEN_FILE,
                file=self.token_file,
                what=(names or OWN_NAMES).label("token_file"),
            ),
        )


def _at_least(names: Vocabulary, field_name: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise ValidationError(names.label(field_name), f"must be at least {low}, got {value}")
