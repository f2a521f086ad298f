"""Task slots: how many tasks a query's Spark runs at once, worked out by
the reader agent from its task's Spark configuration
(:mod:`multikafka.spark._slots`), reported with its reads, and used by the
planner for the query's later micro-batches when the planning request does
not say (:mod:`multikafka.coordinator.agents.task_slots`)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import grpc
import pytest

from multikafka.coordinator.agents.task_slots import MAX_TASK_SLOTS, TaskSlots
from multikafka.coordinator.api.reader import ReaderService
from multikafka.core._offsets import as_offsets
from multikafka.devstack.stack import stream_doc
from multikafka.spark import _slots as slots
from multikafka.spark._slots import slots_of, task_slots
from multikafka.v1 import reader_pb2
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.agents.task_slots",
    "multikafka.coordinator.api.reader",
    "multikafka.core._offsets",
    "multikafka.spark._slots",
)


# -- the rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.master": "local[2]"}, 2),
        ({"spark.master": "local[4, 2]"}, 4),
        ({"spark.master": "local[*]"}, 16),
        ({"spark.master": "local[*,3]"}, 16),
        ({"spark.master": "local"}, 1),
        ({"spark.master": "spark://h:7077", "spark.cores.max": "6"}, 6),
        (
            {"spark.master": "yarn", "spark.executor.instances": "3", "spark.executor.cores": "4"},
            12,
        ),
        # the executor count alone says nothing (dynamic allocation): unknown
        ({"spark.master": "yarn", "spark.executor.cores": "4"}, 0),
        # spark.default.parallelism wins over everything
        ({"spark.master": "local[2]", "spark.default.parallelism": "7"}, 7),
        ({"spark.master": "yarn", "spark.default.parallelism": " 9 "}, 9),
        ({"spark.master": "k8s://h", "spark.default.parallelism": "x"}, 0),
        ({}, 0),
    ],
)
def test_slots_of(conf: dict[str, str], expected: int) -> None:
    assert slots_of(conf.get, cores=16) == expected


def test_local_star_without_knowing_the_cores_is_unknown() -> None:
    assert slots_of({"spark.master": "local[*]"}.get, cores=0) == 0


def test_task_slots_reads_the_task_context(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import TaskContext

    props = {"spark.master": "local[*]", "spark.executor.id": "driver"}
    context = SimpleNamespace(getLocalProperty=props.get)
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: context))
    monkeypatch.setattr(slots.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert task_slots() == 3
    props["spark.master"] = "local[2]"
    assert task_slots() == 2


def test_task_slots_outside_a_task_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import TaskContext

    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: None))
    assert task_slots() == 0


def test_cores_follow_the_affinity() -> None:
    if hasattr(os, "sched_getaffinity"):
        assert slots._cores() == len(os.sched_getaffinity(0))


# -- the coordinator's memory -------------------------------------------------


def test_task_slots_keeps_the_last_report_of_recent_queries() -> None:
    kept = TaskSlots(keep=2)
    kept.note("q1", 2)
    kept.note("q1", 0)  # unknown changes nothing
    kept.note("", 5)  # no query: nothing
    assert kept.of("q1") == 2
    kept.note("q2", 4)
    kept.note("q1", 3)
    kept.note("q3", 8)  # q2 reported least recently: dropped
    assert (kept.of("q1"), kept.of("q2"), kept.of("q3")) == (3, 0, 8)


# -- reported, then planned -----------------------------------------------------

A, B = "h:1", "h:2"
#: Two clusters x two partitions, 100 records each.
START = as_offsets({"a/t/0": 0, "a/t/1": 0, "b/t/0": 0, "b/t/1": 0})
END = as_offsets({"a/t/0": 100, "a/t/1": 100, "b/t/0": 100, "b/t/1": 100})


class Aborted(Exception):
    pass


class Context:
    """What the Reader service's methods use of gRPC's servicer context."""

    async def abort(self, code: grpc.StatusCode, details: str, **_: object) -> None:
        raise Aborted(code, details)


async def _report(parts: Parts, query_id: str, task_slots: int) -> None:
    service = ReaderService(lambda: parts.link, parts.store, 2.0)
    request = reader_pb2.ReportReadsRequest(
        agent_id="agent",
        stream="s",
        query_id=query_id,
        marks=[reader_pb2.ReadMark(split="a/t/0", last_offset=99, last_timestamp_ms=1)],
        task_slots=task_slots,
    )
    await service.ReportReads(request, Context())  # type: ignore[arg-type]


async def _tasks(
    parts: Parts, query_id: str, *, parallelism: int = 0, min_partitions: int = 0
) -> int:
    plan = await parts.batches.plan(
        parts.store.get("s"),
        query_id,
        START,
        END,
        min_partitions=min_partitions,
        max_records_per_partition=None,
        parallelism=parallelism,
    )
    return len(plan.task_ranges)


@pytest.fixture
async def stream(parts: Parts) -> Parts:
    for bootstrap in (A, B):
        for p in (0, 1):
            parts.kafka.cluster(bootstrap).add_records("t", p, list(range(1, 101)))
    await parts.put(stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}))
    return parts


async def test_a_reported_parallelism_sizes_the_querys_next_batches(stream: Parts) -> None:
    parts = stream
    # Nothing known: 400 records are one task (below MIN_RECORDS_PER_TASK).
    assert await _tasks(parts, "q") == 1
    await _report(parts, "q", 2)
    assert await _tasks(parts, "q") == 2
    await _report(parts, "q", 3)
    assert await _tasks(parts, "q") == 3
    # Only that query's.
    assert await _tasks(parts, "other") == 1
    # What the request says wins (multikafka.spark.register).
    assert await _tasks(parts, "q", parallelism=4) == 4
    # minPartitions still asks for more.
    assert await _tasks(parts, "q", min_partitions=4) == 4


async def test_an_absurd_report_is_refused_and_leaves_nothing(stream: Parts) -> None:
    parts = stream
    with pytest.raises(Aborted, match="task_slots: must be at most"):
        await _report(parts, "q", MAX_TASK_SLOTS + 1)
    assert await _tasks(parts, "q") == 1
