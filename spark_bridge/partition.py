"""Spark input partitions: everything a task needs to read, picklable, and
with secrets out of ``repr`` (Spark prints partitions in logs and the UI)."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from multikafka_core.payloads import PayloadDecoding
from multikafka_core.providers.kafka_overrides import Overrides
from multikafka_core.transport import ConnectConfig
from multikafka_core.v1 import planner_pb2
from reader_agent.plan import tasks_from_plan
from reader_agent.task import ReadTask


class MultiKafkaPartition(InputPartition):
    def __init__(self, task: ReadTask) -> None:
        super().__init__(None)
        self.task = task

    def __repr__(self) -> str:
        return f"MultiKafkaPartition({self.task!r})"


def partitions_from_plan(
    plan: planner_pb2.PlanPartitionsResponse,
    *,
    coordinator: ConnectConfig,
    stream: str,
    query_id: str,
    include_headers: bool,
    fail_on_data_loss: bool,
    decoding: PayloadDecoding | None = None,
    overrides: Overrides | None = None,
) -> list[MultiKafkaPartition]:
    """One Spark partition per planned task (:func:`reader_agent.plan.tasks_from_plan`)."""
    return [
        MultiKafkaPartition(task)
        for task in tasks_from_plan(
            plan,
            coordinator=coordinator,
            stream=stream,
            query_id=query_id,
            include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss,
            decoding=decoding,
            overrides=overrides,
        )
    ]
