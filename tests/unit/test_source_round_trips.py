"""The Spark stream reader's calls to the coordinator per micro-batch: one
round trip (``LatestOffsets`` with the batch's tasks and the previous
batch's commit), with a fake planner client standing in for gRPC."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Mapping
from typing import Any

from multikafka.core import _offsets as ov
from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.model import Connection
from multikafka.core.planner_client import LatestOffsets, Plan, TaskOptions
from multikafka.spark import parse_options
from multikafka.spark._commits import PendingCommit
from multikafka.spark._compat import ReadAllAvailable
from multikafka.spark._source import MultiKafkaStreamReader
from tests.helpers import eventually

INTERNALS = (
    "multikafka.core._offsets",
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.spark._commits",
    "multikafka.spark._compat",
    "multikafka.spark._source",
)


def _plan(start: int, end: int) -> Plan:
    return Plan(
        tasks=((SplitRange("a", "t", 0, start, end),),),
        clusters={"a": Connection("a", "h:1", Properties({"sasl.password": "s3cret"}))},
        generation=3,
    )


class Planner:
    """Answers LatestOffsets with ``a/t/0`` ten records further, and the
    tasks when asked; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def _record(self, name: str, **what: Any) -> None:
        with self.lock:
            self.calls.append((name, what))

    def latest_offsets(
        self,
        stream: str,
        query_id: str,
        start: Mapping[str, int],
        *,
        tasks: TaskOptions | None = None,
        committed: Mapping[str, int] | None = None,
        group_id: str = "",
        **limits: Any,
    ) -> LatestOffsets:
        self._record("latest", start=dict(start), committed=committed and dict(committed))
        at = start.get("a/t/0", 0)
        end = ov.as_offsets({"a/t/0": at + 10})
        return LatestOffsets(end, end, None if tasks is None else _plan(at, at + 10))

    def plan(self, stream: str, query_id: str, start: Any, end: Any, **sizing: int) -> Plan:
        self._record("plan", start=dict(start), end=dict(end))
        return _plan(start["a/t/0"], end["a/t/0"])

    def commit(self, stream: str, query_id: str, end: Mapping[str, int], group_id: str) -> None:
        self._record("commit", end=dict(end), group_id=group_id)

    def close(self) -> None:
        pass


def _reader(planner: Planner, **options: str) -> MultiKafkaStreamReader:
    opts = parse_options({"coordinator": "127.0.0.1:1", "stream": "s", **options}, streaming=True)
    reader = MultiKafkaStreamReader(opts)
    reader._client = planner  # type: ignore[assignment]
    return reader


def _trigger(reader: MultiKafkaStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """What Spark's micro-batch loop calls for a new batch, in its order:
    the end, then the commit of the batch before, then the tasks."""
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(start)
    parts = reader.partitions(start, end)
    assert [(r.start, r.until) for p in parts for r in p.task.ranges] == [
        (ov.parse(start)["a/t/0"], ov.parse(end)["a/t/0"])
    ]
    return end


def test_a_micro_batch_is_one_round_trip_carrying_the_last_commit() -> None:
    planner = Planner()
    reader = _reader(planner, commitGroupId="g")
    start: dict[str, Any] = {"a/t/0": 0}
    for _ in range(3):
        start = _trigger(reader, start)
    assert [name for name, _ in planner.calls] == ["latest"] * 3
    assert [what["committed"] for _, what in planner.calls] == [None, {"a/t/0": 0}, {"a/t/0": 10}]
    reader.stop()  # the last commit is told when the query stops
    assert planner.calls[-1] == ("commit", {"end": {"a/t/0": 20}, "group_id": "g"})


def test_a_batch_planned_again_on_restart_asks_for_its_tasks() -> None:
    planner = Planner()
    reader = _reader(planner)
    reader.latestOffset({"a/t/0": 0}, ReadAllAvailable())
    # Spark replays the last batch of its offset log: not the one just planned.
    parts = reader.partitions({"a/t/0": 5}, {"a/t/0": 8})
    assert [(r.start, r.until) for p in parts for r in p.task.ranges] == [(5, 8)]
    assert [name for name, _ in planner.calls] == ["latest", "plan"]


def test_a_commit_no_trigger_carries_is_sent_by_itself() -> None:
    sent: list[dict[str, int]] = []
    pending = PendingCommit(lambda end: sent.append(end.to_dict()), after_s=0.05)
    pending.put(ov.as_offsets({"a/t/0": 1}))
    pending.put(ov.as_offsets({"a/t/0": 2}))  # only the latest matters
    eventually(lambda: sent == [{"a/t/0": 2}], timeout_s=5)
    assert pending.take() is None


def test_a_commit_taken_for_a_call_that_failed_is_sent_later() -> None:
    sent: list[dict[str, int]] = []
    pending = PendingCommit(lambda end: sent.append(end.to_dict()), after_s=60)
    pending.put(ov.as_offsets({"a/t/0": 1}))
    taken = pending.take()
    pending.put_back(taken)
    pending.flush()
    assert sent == [{"a/t/0": 1}]


def test_executors_get_no_plan_or_commit_of_the_driver() -> None:
    planner = Planner()
    reader = _reader(planner)
    reader.latestOffset({"a/t/0": 0}, ReadAllAvailable())
    reader.commit({"a/t/0": 0})
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._planned is None
    assert copy._commits is None
    assert b"s3cret" not in pickle.dumps(reader)
