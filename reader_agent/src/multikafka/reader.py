"""The standalone reader: a stream read through the coordinator without Spark.

    from multikafka import Reader
    with Reader("127.0.0.1:7070", "orders", starting_offsets="earliest") as r:
        for batch in r.batches(idle_timeout_s=5):   # pyarrow.RecordBatch
            ...
            r.commit()
        saved = r.offsets                           # resume: starting_offsets=saved

It is a query to the coordinator like a Spark query, through the same calls
(resolve, latest offsets, plan, commit) and the same reader agent in this
process: the same reconcile, failover translation, drain and cleanup. Its
batches have the Spark source's schema (``cluster`` included; decoded
``key``/``value`` with ``key_format``/``value_format``).

A micro-batch is planned, its tasks read one after the other (each task's
clusters at the same time) and their Arrow batches yielded as they come (the
last one once the read has ended). :attr:`Reader.offsets` is exact after
every batch: where each split goes on, and with a micro-batch's last batch
its end. ``commit`` tells the
coordinator (and, with ``commit_group_id``, each cluster's consumer group)
that this position is done; a drain completes only once every query reading
the draining cluster committed past its end, so commit as you go.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Generator, Mapping
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from multikafka.core import _offsets as ov
from multikafka.core._admission import DEFAULT_MAX_DELAY_S
from multikafka.core._positions import offsets_position, with_split_times
from multikafka.core.exceptions import ValidationError
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent import ReaderAgent, get_agent
from multikafka.reader_agent._options import ReadOptions, Vocabulary
from multikafka.reader_agent._overrides import check_overrides
from multikafka.reader_agent._payloads import PayloadDecoding
from multikafka.reader_agent._plan import read_tasks, task_options, tasks_from_plan
from multikafka.v1 import planner_pb2

logger = logging.getLogger(__name__)

Position = planner_pb2.Position
#: Where a reader starts: "earliest" | "latest" | JSON text like Spark's
#: ``startingOffsets`` (-2 earliest, -1 latest) | a position it gave
#: (:attr:`Reader.offsets`), resumed exactly.
Start = str | Mapping[str, Any]

#: How the Reader names the fields of :class:`ReadOptions`: by its arguments
#: (decoding errors name the Spark source's options: ``option valueFormat``).
NAMES = Vocabulary(
    written={
        "stream": "stream",
        "coordinator": "coordinator",
        "tls_ca": "tls_ca",
        "tls_cert": "tls_cert",
        "tls_key": "tls_key",
        "token_file": "token_file",
        "coordinator_timeout_s": "coordinator_timeout_s",
        "starting": "starting_offsets",
        "resume_at": "starting_offsets",
        "max_records_per_batch": "max_records_per_batch",
        "min_records_per_batch": "min_records_per_batch",
        "max_batch_delay_s": "max_batch_delay_s",
        "fail_on_data_loss": "fail_on_data_loss",
        "include_headers": "include_headers",
        "query_id": "query_id",
        "commit_group_id": "commit_group_id",
        "decoding": "key_format, key_schema, value_format, value_schema, mode",
        "kafka": "kafka",
    },
    absent={
        "ending": "a Reader reads a stream, which has no end (Spark batch queries have one)",
        "min_partitions": "Spark partitions: a Reader reads a micro-batch's tasks one after the other",
        "max_records_per_partition": (
            "Spark partitions: a Reader's tasks keep the default size (100,000 records)"
        ),
        "parallelism": "1: a Reader reads a micro-batch's tasks one after the other",
    },
)


class Reader:
    """Reads one logical stream through the coordinator at ``coordinator``
    (``host:port``, or several comma-separated replicas).

    ``starting_offsets``: ``"earliest"``, ``"latest"`` (default, as a Spark
    stream), JSON text like Spark's ``startingOffsets``, or a position this
    reader gave (:attr:`offsets`): then it resumes exactly there, as a Spark
    query does from its checkpoint (splits that appeared since enter where the
    coordinator says: their cluster's starting position, or translated after a
    failover). ``starting_timestamp_ms``: start at the first record at or after
    that time instead. ``starting_offsets_by_timestamp``: JSON text or a
    document like Spark's ``startingOffsetsByTimestamp`` (``{"cluster":
    {"topic": {"0": ms}}}`` or ``{"cluster/topic/0": ms}``): each split named
    starts at its first record at or after its time, the others where the
    starting position says; ``starting_offsets_by_timestamp_strategy``:
    ``error`` (default: a named split with no such record fails the start)
    or ``latest`` (it starts at its latest offset). ``max_records_per_batch``:
    at most this many records per micro-batch (Spark's
    ``maxOffsetsPerTrigger``); ``min_records_per_batch``: no micro-batch
    until this many records are available, unless ``max_batch_delay_s``
    (default 900, Spark's 15 minutes) passed since the last one (Spark's
    ``minOffsetsPerTrigger`` / ``maxTriggerDelay``; a batch whose split set
    changes never waits). ``kafka``: librdkafka settings of this reader's
    consumers on every cluster (``{"fetch.max.bytes": "1048576"}``), over
    the stream document's; group, commit, offset-reset, broker and security
    settings are refused. Decoding:
    ``key_format``/``value_format`` (``raw``, ``string``, ``json`` with
    ``key_schema``/``value_schema`` in Spark DDL) and ``mode`` (``PERMISSIVE``,
    ``DROPMALFORMED``, ``FAILFAST``), as the Spark source's options.
    Credentials: the reader token from ``token_file``, else
    ``MULTIKAFKA_READER_TOKEN`` or ``MULTIKAFKA_READER_TOKEN_FILE``; TLS with
    ``tls_ca`` (default ``MULTIKAFKA_TLS_CA``), and ``tls_cert``/``tls_key``
    for mutual TLS (PEM files).

    The arguments become :attr:`options`, a
    :class:`~multikafka.reader_agent._options.ReadOptions`: the model the Spark
    source's options map onto too, checked in this reader's words
    (:data:`NAMES`).
    """

    def __init__(
        self,
        coordinator: str | ConnectConfig,
        stream: str,
        *,
        starting_offsets: Start = "latest",
        starting_timestamp_ms: int | None = None,
        max_records_per_batch: int | None = None,
        min_records_per_batch: int | None = None,
        max_batch_delay_s: float = DEFAULT_MAX_DELAY_S,
        starting_offsets_by_timestamp: str | Mapping[str, Any] | None = None,
        starting_offsets_by_timestamp_strategy: str = "error",
        kafka: Mapping[str, str] | None = None,
        fail_on_data_loss: bool = True,
        include_headers: bool = False,
        key_format: str = "raw",
        key_schema: str = "",
        value_format: str = "raw",
        value_schema: str = "",
        mode: str = "PERMISSIVE",
        query_id: str | None = None,
        commit_group_id: str = "",
        token_file: str = "",
        tls_ca: str = "",
        tls_cert: str = "",
        tls_key: str = "",
        coordinator_timeout_s: float = 60.0,
        poll_interval_s: float = 0.2,
        agent: ReaderAgent | None = None,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValidationError("poll_interval_s", f"must be above 0, got {poll_interval_s}")
        start = _start(starting_offsets, starting_timestamp_ms)
        if starting_offsets_by_timestamp is not None:
            if not isinstance(start, Position):
                raise ValidationError(
                    "starting_offsets_by_timestamp",
                    "cannot go with a position a Reader gave (it is resumed exactly)",
                )
            start = with_split_times(
                start,
                starting_offsets_by_timestamp,
                starting_offsets_by_timestamp_strategy,
                field="starting_offsets_by_timestamp",
                strategy_field="starting_offsets_by_timestamp_strategy",
                offsets_field="starting_offsets",
            )
        #: What this reader asks of reading (the model the Spark source's
        #: options map onto too), checked.
        self.options = ReadOptions(
            stream=stream,
            coordinator=str(coordinator),
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            token_file=token_file,
            coordinator_timeout_s=coordinator_timeout_s,
            starting=start if isinstance(start, Position) else Position(kind=Position.LATEST),
            resume_at=start if isinstance(start, dict) else None,
            max_records_per_batch=max_records_per_batch,
            min_records_per_batch=min_records_per_batch,
            max_batch_delay_s=max_batch_delay_s,
            fail_on_data_loss=fail_on_data_loss,
            include_headers=include_headers,
            # A micro-batch's tasks are read one after the other.
            parallelism=1,
            query_id=query_id or "",
            commit_group_id=commit_group_id,
            decoding=PayloadDecoding.parse(
                key_format=key_format,
                key_schema=key_schema,
                value_format=value_format,
                value_schema=value_schema,
                mode=mode,
            ),
            kafka=check_overrides(kafka or {}, f"{NAMES.label('kafka')}."),
            names=NAMES,
        )
        self.query_id = self.options.query_id_for_run()
        self._gate = self.options.min_records_gate()
        #: The Arrow schema of every batch.
        self.schema: pa.Schema = self.options.decoding.arrow_schema(
            include_headers=self.options.include_headers
        )
        self.connect = (
            coordinator
            if isinstance(coordinator, ConnectConfig)
            else self.options.connect_config(NAMES)
        )
        self._poll_s = poll_interval_s
        self._client = PlannerClient(self.connect, timeout_s=self.options.coordinator_timeout_s)
        self._agent = agent
        #: Where each split goes on; None until the first batch resolves the start.
        self._position: dict[str, int] | None = None
        #: The position last told to the coordinator by :meth:`commit`.
        self._committed: dict[str, int] | None = None
        self._closed = False

    @property
    def stream(self) -> str:
        """The logical stream this reader reads."""
        return self.options.stream

    # -- position ------------------------------------------------------------------

    @property
    def offsets(self) -> dict[str, Any]:
        """The position after the last batch yielded: a JSON-able document
        (Spark's offset form) to give as ``starting_offsets`` to resume."""
        return ov.to_document(self._current())

    def _current(self) -> dict[str, int]:
        if self._position is None:
            if self.options.resume_at is not None:
                self._position = dict(self.options.resume_at)
            else:
                resolved, _ = self._client.resolve(
                    self.stream, self.options.starting, isolation_level=self.options.isolation_level
                )
                self._position = dict(resolved)
                logger.info("query %s starts at %s", self.query_id, ov.to_json(resolved))
        return self._position

    def commit(self) -> None:
        """Tell the coordinator this query is done up to :attr:`offsets`
        (and commit them to ``commit_group_id`` on every cluster, if set)."""
        position = self._current()
        self._client.commit(self.stream, self.query_id, position, self.options.commit_group_id)
        self._committed = position

    # -- reading -------------------------------------------------------------------

    def batches(self, idle_timeout_s: float | None = None) -> Generator[pa.RecordBatch, None, None]:
        """Arrow batches of the stream as they come, micro-batch after
        micro-batch. Ends after ``idle_timeout_s`` seconds without a
        micro-batch (None: never; records held back by
        ``min_records_per_batch`` do not make one). Leaving the loop early
        is fine: the next call goes on from :attr:`offsets`."""
        if self._closed:
            raise ValidationError("reader", "closed; open a new Reader to read again")
        agent = self._agent or get_agent()
        idle_since = time.monotonic()
        while True:
            start = self._current()
            got = self._client.latest_offsets(
                self.stream,
                self.query_id,
                start,
                max_records=self.options.max_records_per_batch or 0,
                cap=None,
                fail_on_data_loss=self.options.fail_on_data_loss,
                tasks=task_options(self.options),
                isolation_level=self.options.isolation_level,
            )
            end = dict(got.end)
            if end == start or (
                self._gate is not None and not self._gate.admit(start, got.end, got.available)
            ):
                if idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                    return
                time.sleep(self._poll_s)
                continue
            tasks = (
                tasks_from_plan(
                    got.plan, self.options, coordinator=self.connect, query_id=self.query_id
                )
                if got.plan is not None
                else read_tasks(
                    self._client,
                    self.options,
                    coordinator=self.connect,
                    query_id=self.query_id,
                    start=start,
                    end=end,
                )
            )
            # Until the micro-batch's last batch is yielded, the position is
            # its start moved past what was yielded; with the last one (held
            # back until the read ends) it is the micro-batch's end: splits it
            # retires (a drained or failed-over cluster's) leave, splits it
            # adds join, so a commit after the last batch completes drains.
            # Resumed from between, the coordinator plans the rest of the
            # micro-batch again, translation included.
            moving = dict(start)
            held: pa.RecordBatch | None = None
            for task in tasks:
                for batch in agent.read(task):
                    if not batch.num_rows:
                        continue
                    if held is not None:
                        _advance(moving, held)
                        self._position = moving
                        yield held
                    held = batch
            before, self._position = self._position, end
            if held is not None:
                yield held
            elif before == self._committed:
                # A micro-batch without records that changed the splits (a
                # drained cluster's retired, a new one's entered): nothing for
                # the caller to process, so nothing to commit after; where the
                # caller had committed everything before it, its end is
                # committed here, or a drain would wait for the next record.
                self.commit()
            idle_since = time.monotonic()

    async def abatches(self, idle_timeout_s: float | None = None) -> AsyncIterator[pa.RecordBatch]:
        """:meth:`batches` for asyncio: the reading runs on a worker thread,
        the event loop stays free."""
        it = self.batches(idle_timeout_s)
        done = object()
        try:
            while True:
                batch = await asyncio.to_thread(next, it, done)
                if batch is done:
                    return
                yield batch
        finally:
            await asyncio.to_thread(it.close)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Drop the coordinator channel (the process's reader agent stays,
        for other readers; it closes idle consumers by itself)."""
        self._closed = True
        self._client.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"Reader(coordinator={str(self.connect)!r}, stream={self.stream!r}, query={self.query_id!r})"


def _start(value: Start, timestamp_ms: int | None) -> Position | dict[str, int]:
    """Where a reader starts: a Position the coordinator resolves, or a
    position it gave (resumed as it is)."""
    if timestamp_ms is not None:
        if timestamp_ms < 0:
            raise ValidationError("starting_timestamp_ms", f"must be >= 0, got {timestamp_ms}")
        return Position(kind=Position.TIMESTAMP, timestamp_ms=timestamp_ms)
    if isinstance(value, Mapping):
        return dict(ov.parse(dict(value), "starting_offsets"))
    if not isinstance(value, str):
        raise ValidationError(
            "starting_offsets",
            f"must be earliest, latest, JSON text or a position a Reader gave, got {type(value).__name__}",
        )
    return offsets_position(value, "starting_offsets")


def _advance(position: dict[str, int], batch: pa.RecordBatch) -> None:
    """Move each split of ``position`` past its last record in ``batch``."""
    table = pa.Table.from_batches([batch]).select(["cluster", "topic", "partition", "offset"])
    last = table.group_by(["cluster", "topic", "partition"]).aggregate([("offset", "max")])
    for cluster, topic, partition, offset in zip(
        last.column("cluster").to_pylist(),
        last.column("topic").to_pylist(),
        last.column("partition").to_pylist(),
        pc.add(last.column("offset_max"), 1).to_pylist(),
        strict=True,
    ):
        split = f"{cluster}/{topic}/{partition}"
        if split in position:
            position[split] = max(position[split], offset)
