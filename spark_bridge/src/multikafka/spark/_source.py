"""The ``multikafka`` PySpark data source and its stream and batch readers.

Driver side: the readers talk only to the coordinator (through
:class:`~multikafka.core.planner_client.PlannerClient`). Executor side:
``read`` hands the partition's task to the process-wide reader agent.

Spark constructs a reader in a planning worker and pickles its ``read`` to the
executors, so a reader opens its gRPC channel lazily and drops it when pickled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from multikafka.core import _offsets as ov
from multikafka.core._admission import MinRecordsGate
from multikafka.core.exceptions import ValidationError
from multikafka.core.logs import logger_of
from multikafka.core.planner_client import Plan, PlannerClient
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent import get_agent
from multikafka.reader_agent._options import ReadOptions
from multikafka.reader_agent._plan import read_tasks, task_options, tasks_from_plan
from multikafka.spark._commits import PendingCommit
from multikafka.spark._compat import (
    SPARK_VERSION,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from multikafka.spark._options import NAMES, decoding_of, parse_options
from multikafka.spark._partition import MultiKafkaPartition
from multikafka.spark._slots import slots_of, task_slots
from multikafka.v1 import planner_pb2

logger = logger_of(__name__)


class _Base:
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.query_id = options.query_id_for_run()
        self._client: PlannerClient | None = None
        self._connect: ConnectConfig | None = None

    @property
    def connect(self) -> ConnectConfig:
        """How to reach the coordinator (files read once, on the driver)."""
        if self._connect is None:
            self._connect = self.options.connect_config(NAMES)
        return self._connect

    @property
    def client(self) -> PlannerClient:
        if self._client is None:
            self._client = PlannerClient(self.connect, timeout_s=self.options.coordinator_timeout_s)
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _partitions(
        self, start: ov.SplitOffsets, end: ov.SplitOffsets
    ) -> list[MultiKafkaPartition]:
        tasks = read_tasks(
            self.client,
            self.options,
            coordinator=self.connect,
            query_id=self.query_id,
            start=start,
            end=end,
        )
        return [MultiKafkaPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MultiKafkaPartition):
            raise TypeError(f"not a multikafka partition: {type(partition).__name__}")
        return get_agent().read(partition.task, task_slots=task_slots())


class MultiKafkaStreamReader(_Base, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's micro-batch reader. Spark keeps one instance per query in a
    planning worker, so what it learns between calls (when the last batch
    started, the latest offsets) lives here.

    Spark 4.0 and 4.1 call ``latestOffset()`` without the batch's start
    (:mod:`multikafka.spark._compat`). The next batch then starts where the
    last one Spark planned ends: Spark plans the last batch of its offset
    log again when a query restarts, before it asks for new offsets (what
    PySpark's own ``SimpleDataSourceStreamReader`` relies on too), and on
    a first start it is the initial offsets."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self._target: ov.SplitOffsets | None = None
        #: minOffsetsPerTrigger / maxTriggerDelay (None: not set).
        self._gate = options.min_records_gate()
        #: What was available at the last latestOffset (reportLatestOffset).
        self._available: ov.SplitOffsets | None = None
        #: The initial offsets, resolved once (Spark < 4.2 may ask for the
        #: latest offsets first and must then get the same start).
        self._initial: dict[str, Any] | None = None
        #: Where the next batch starts: the end of the last batch Spark
        #: planned or was given (Spark < 4.2 does not say).
        self._next_start: dict[str, Any] | None = None
        #: Whether Spark (< 4.2) asked for the latest offsets in this run.
        self._asked = False
        #: The tasks the coordinator planned with the last latestOffset:
        #: (start, end, plan); ``partitions`` for that batch takes them.
        self._planned: tuple[dict[str, Any], dict[str, Any], Plan] | None = None
        #: Commits not told to the coordinator yet (see :meth:`commit`).
        self._commits = PendingCommit(self._send_commit)

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader for its read(): not the driver's plans
        # (connection settings) or commits.
        state = super().__getstate__()
        state["_planned"] = None
        state["_commits"] = None
        return state

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            offsets, _ = self.client.resolve(
                self.options.stream,
                self.options.starting,
                isolation_level=self.options.isolation_level,
            )
            logger.info("query %s starts at %s", self.query_id, offsets)
            self._initial = ov.to_document(offsets)
        if self._next_start is None:
            self._next_start = self._initial
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: with both minOffsetsPerTrigger and
        # maxOffsetsPerTrigger the limit is the maximum and latestOffset
        # applies the minimum itself.
        if self.options.max_records_per_batch:
            return ReadMaxRows(self.options.max_records_per_batch)
        if self.options.min_records_per_batch:
            return ReadMinRows(self.options.min_records_per_batch)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch from ``start`` within ``limit``.
        Spark 4.0 and 4.1 pass neither: the batch starts where the last
        one ends, and the options' own limits apply (:meth:`_own_limit`)."""
        hold = True
        if start is None or limit is None:
            start = self._next_start if self._next_start is not None else self.initialOffset()
            limit, hold = self._own_limit()
        if isinstance(limit, ReadMaxRows):
            max_records = int(limit.max_rows)
        elif isinstance(limit, (ReadAllAvailable, ReadMinRows)):
            max_records = 0
        else:
            raise ValidationError(
                "read limit",
                f"{type(limit).__name__} is not supported; use maxOffsetsPerTrigger "
                "or minOffsetsPerTrigger",
            )
        begin = ov.parse(start, "start")
        committed = self._commits.take()
        try:
            got = self.client.latest_offsets(
                self.options.stream,
                self.query_id,
                begin,
                max_records=max_records,
                cap=self._target,
                fail_on_data_loss=self.options.fail_on_data_loss,
                tasks=task_options(self.options),
                committed=committed,
                group_id=self.options.commit_group_id,
                isolation_level=self.options.isolation_level,
            )
        except BaseException:
            self._commits.put_back(committed)
            raise
        self._available = got.available
        end = ov.to_document(got.end)
        self._planned = None if got.plan is None else (start, end, got.plan)
        gate = self._gate_for(limit)
        if gate is not None and not gate.admit(begin, got.end, got.available, hold=hold):
            logger.debug(
                "query %s: fewer than minOffsetsPerTrigger=%d records available; "
                "batch held back (%.1fs of maxTriggerDelay=%.1fs waited)",
                self.query_id,
                gate.min_records,
                gate.waited_s(),
                gate.max_delay_s,
            )
            return start
        self._next_start = end
        return end

    def _own_limit(self) -> tuple[ReadLimit, bool]:
        """The options' read limit when Spark (< 4.2) passes none, and
        whether minOffsetsPerTrigger may hold the batch back. Those versions
        do not tell the source its trigger, and under Trigger.AvailableNow
        or Once they ask once per run: so the first micro-batch of a run is
        never held (a held one would end such a run with nothing read), and
        the first time a limit applies a warning says what it does."""
        limit = self.getDefaultReadLimit()
        first, self._asked = not self._asked, True
        if first and not isinstance(limit, ReadAllAvailable):
            logger.warning(
                "query %s: Spark %s has no admission control for Python sources "
                "(Spark 4.2 has): multikafka applies maxOffsetsPerTrigger, "
                "minOffsetsPerTrigger and maxTriggerDelay itself, from the second "
                "micro-batch of a run for the minimum; under Trigger.AvailableNow or "
                "Trigger.Once, Spark asks once: a run reads one micro-batch of at "
                "most maxOffsetsPerTrigger records",
                self.query_id,
                SPARK_VERSION,
            )
        return limit, not first

    def _gate_for(self, limit: ReadLimit) -> MinRecordsGate | None:
        """The minOffsetsPerTrigger gate, if it applies to this call: not
        under Trigger.AvailableNow (Spark's rule: it would wait forever), and
        not when Spark asks for everything available (ReadAllAvailable, e.g.
        Trigger.Once), whatever the options say."""
        if self._gate is None or self._target is not None:
            return None
        return self._gate if isinstance(limit, (ReadMinRows, ReadMaxRows)) else None

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The offsets available at the last latestOffset, without the read
        limit: Spark shows them as the source's ``latestOffset`` in the
        query's progress (how far behind the query is)."""
        return None if self._available is None else ov.to_document(self._available)

    def prepareForTriggerAvailableNow(self) -> None:
        latest = planner_pb2.Position(kind=planner_pb2.Position.LATEST)
        self._target, _ = self.client.resolve(
            self.options.stream, latest, isolation_level=self.options.isolation_level
        )
        logger.info("query %s reads up to %s (Trigger.AvailableNow)", self.query_id, self._target)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[MultiKafkaPartition]:
        """The batch's tasks: those the coordinator planned with the
        latestOffset that gave ``end`` when the batch is that one (no round
        trip), else planned now (a batch Spark plans again on restart)."""
        self._next_start = end
        planned, self._planned = self._planned, None
        if planned is not None and planned[0] == start and planned[1] == end:
            tasks = tasks_from_plan(
                planned[2], self.options, coordinator=self.connect, query_id=self.query_id
            )
            return [MultiKafkaPartition(task) for task in tasks]
        return self._partitions(ov.parse(start, "start"), ov.parse(end, "end"))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the batch ending at ``end``: the coordinator
        learns it with the next latestOffset (Spark calls it next, as a
        rule), or by itself if that does not come within a second
        (:mod:`multikafka.spark._commits`), or when the query stops."""
        self._commits.put(ov.parse(end, "end"))

    def _send_commit(self, end: ov.SplitOffsets) -> None:
        self.client.commit(self.options.stream, self.query_id, end, self.options.commit_group_id)

    def stop(self) -> None:
        self._commits.flush()
        if self._client is not None:
            self._client.close()


class MultiKafkaBatchReader(_Base, DataSourceReader):
    def partitions(self) -> list[MultiKafkaPartition]:
        start, _ = self.client.resolve(
            self.options.stream, self.options.starting, isolation_level=self.options.isolation_level
        )
        end, _ = self.client.resolve(
            self.options.stream, self.options.ending, isolation_level=self.options.isolation_level
        )
        # A split only the end knows starts where it ends (the coordinator
        # plans nothing for it); one only the start knows is not read.
        return self._partitions(start, end)


class MultiKafkaDataSource(DataSource):
    """``spark.readStream.format("multikafka")``: one logical stream read from
    all the Kafka clusters its metadata names, exactly once."""

    #: Tasks the Spark session runs at once; the planner sizes micro-batches
    #: by it. Python workers cannot ask Spark, so :func:`register` sets it on
    #: the class it registers (0: unknown; the executors then tell the
    #: coordinator, :mod:`multikafka.spark._slots`).
    default_parallelism: int = 0

    @classmethod
    def name(cls) -> str:
        return "multikafka"

    def schema(self) -> str:
        """The declared schema: Spark's Kafka source plus ``cluster``, with
        ``key``/``value`` decoded as the options say (and their
        ``_corrupt_*`` columns)."""
        opts = {k.lower(): str(v) for k, v in self.options.items()}
        headers = opts.get("includeheaders", "false").strip().lower() == "true"
        return decoding_of(opts).spark_ddl(include_headers=headers)

    def reader(self, schema: StructType) -> MultiKafkaBatchReader:
        return MultiKafkaBatchReader(self._parse(streaming=False))

    def streamReader(self, schema: StructType) -> MultiKafkaStreamReader:
        return MultiKafkaStreamReader(self._parse(streaming=True))

    def _parse(self, *, streaming: bool) -> ReadOptions:
        return parse_options(
            self.options, streaming=streaming, parallelism=self.default_parallelism
        )


def register(spark: SparkSession) -> type[MultiKafkaDataSource]:
    """Register the ``multikafka`` format with ``spark`` (a classic or a Spark
    Connect session), knowing how many tasks the session runs at once
    (:func:`parallelism_of`). Spark pickles the registered class by value, so
    the number reaches the Python workers that plan micro-batches. Returns the
    class registered.

    Not needed for the format to work: PySpark finds ``pyspark_multikafka``
    by itself (without the number, which the executors then tell the
    coordinator for a query's micro-batches after its first). Spark
    4.0 keeps the source it found and refuses another under its name: then
    this says so in a warning and returns the source Spark has."""
    parallelism = parallelism_of(spark)
    source = type(
        "MultiKafkaDataSource",
        (MultiKafkaDataSource,),
        {
            "default_parallelism": parallelism,
            "__module__": __name__,
            "__doc__": MultiKafkaDataSource.__doc__,
        },
    )
    try:
        spark.dataSource.register(source)
    except Exception as e:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
        # Spark 4.0 does not let a session replace a source it discovered
        # (4.1 does): the discovered one reads the same; its executors tell the number.
        logger.warning(
            "Spark %s keeps the multikafka source it found installed "
            "(pyspark_multikafka) and cannot register it again with the session's "
            "parallelism (%d): a query's first micro-batch is planned without it "
            "(its executors tell the coordinator for the next ones); set the option "
            "minPartitions for more tasks",
            SPARK_VERSION,
            parallelism,
        )
        return MultiKafkaDataSource
    return source


def parallelism_of(spark: SparkSession) -> int:
    """How many tasks ``spark`` runs at once, 0 when it cannot tell.

    A classic session asks its SparkContext (``defaultParallelism``). A Spark
    Connect session has none, only the configuration, read by the rules of
    :mod:`multikafka.spark._slots` (the ones an executor applies for the
    discovered source, except ``local[*]``: unknown)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except AttributeError:  # Spark Connect: JVM_ATTRIBUTE_NOT_SUPPORTED
        pass
    # local[*] is the server's cores, which a Connect client cannot know.
    return slots_of(lambda key: spark.conf.get(key, ""), cores=0)
