"""Spark input partitions: everything a task needs to read, picklable, and
with secrets out of ``repr`` (Spark prints partitions in logs and the UI)."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from multikafka.reader_agent._task import ReadTask


class MultiKafkaPartition(InputPartition):
    """One planned task (:func:`multikafka.reader_agent._plan.tasks_from_plan`) as Spark's
    input partition."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(None)
        self.task = task

    def __repr__(self) -> str:
        return f"MultiKafkaPartition({self.task!r})"
