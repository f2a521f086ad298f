"""The ``multikafka`` PySpark data source and its stream and batch readers.

Driver side: the readers talk only to the coordinator (through
:class:`~multikafka_core.planner_client.PlannerClient`). Executor side:
``read`` hands the partition's task to the process-wide reader agent.

Spark constructs a reader in a planning worker and pickles its ``read`` to the
executors, so a reader opens its gRPC channel lazily and drops it when pickled.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from multikafka_core import offsets as ov
from multikafka_core.arrow import SPARK_DDL, SPARK_DDL_WITH_HEADERS
from multikafka_core.exceptions import ValidationError
from multikafka_core.planner_client import PlannerClient
from multikafka_core.transport import ConnectConfig
from multikafka_core.v1 import planner_pb2
from reader_agent import get_agent
from spark_bridge.options import SourceOptions, connect_config
from spark_bridge.partition import MultiKafkaPartition, partitions_from_plan

logger = logging.getLogger(__name__)


class _Base:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.query_id = options.query_id or f"{options.stream}-{uuid.uuid4().hex[:12]}"
        self._client: PlannerClient | None = None
        self._connect: ConnectConfig | None = None

    @property
    def connect(self) -> ConnectConfig:
        """How to reach the coordinator (files read once, on the driver)."""
        if self._connect is None:
            self._connect = connect_config(self.options)
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
        self, start: ov.OffsetVector, end: ov.OffsetVector
    ) -> list[MultiKafkaPartition]:
        o = self.options
        plan = self.client.plan(
            o.stream,
            self.query_id,
            start,
            end,
            min_partitions=o.min_partitions,
            max_records_per_partition=o.max_records_per_partition,
        )
        return partitions_from_plan(
            plan,
            coordinator=self.connect,
            stream=o.stream,
            query_id=self.query_id,
            include_headers=o.include_headers,
            fail_on_data_loss=o.fail_on_data_loss,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MultiKafkaPartition):
            raise TypeError(f"not a multikafka partition: {type(partition).__name__}")
        return get_agent().read(partition.task)


class MultiKafkaStreamReader(_Base, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._target: ov.OffsetVector | None = None

    def initialOffset(self) -> dict[str, int]:
        offsets, _ = self.client.resolve(self.options.stream, self.options.starting)
        logger.info("query %s starts at %s", self.query_id, offsets)
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if isinstance(limit, ReadMaxRows):
            max_records = int(limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):
            max_records = 0
        else:
            raise ValidationError(
                "read limit", f"{type(limit).__name__} is not supported; use maxOffsetsPerTrigger"
            )
        return self.client.latest(
            self.options.stream,
            self.query_id,
            ov.parse(start, "start"),
            max_records=max_records,
            cap=self._target,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )

    def prepareForTriggerAvailableNow(self) -> None:
        latest = planner_pb2.Position(kind=planner_pb2.Position.LATEST)
        self._target, _ = self.client.resolve(self.options.stream, latest)
        logger.info("query %s reads up to %s (Trigger.AvailableNow)", self.query_id, self._target)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[MultiKafkaPartition]:
        return self._partitions(ov.parse(start, "start"), ov.parse(end, "end"))

    def commit(self, end: dict[str, int]) -> None:
        self.client.commit(
            self.options.stream, self.query_id, ov.parse(end, "end"), self.options.commit_group_id
        )

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()


class MultiKafkaBatchReader(_Base, DataSourceReader):
    def partitions(self) -> list[MultiKafkaPartition]:
        start, _ = self.client.resolve(self.options.stream, self.options.starting)
        end, _ = self.client.resolve(self.options.stream, self.options.ending)
        # A split only one side knows starts (or ends) where the other says.
        start = {s: start.get(s, end.get(s, 0)) for s in ov.splits_of(start) | ov.splits_of(end)}
        return self._partitions(start, end)


class MultiKafkaDataSource(DataSource):
    """``spark.readStream.format("multikafka")``: one logical stream read from
    all the Kafka clusters its metadata names, exactly once."""

    @classmethod
    def name(cls) -> str:
        return "multikafka"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SPARK_DDL_WITH_HEADERS if headers else SPARK_DDL

    def reader(self, schema: StructType) -> MultiKafkaBatchReader:
        return MultiKafkaBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> MultiKafkaStreamReader:
        return MultiKafkaStreamReader(SourceOptions.parse(self.options, streaming=True))
