"""The Planner's use cases (:class:`multikafka.coordinator.planning.batches.MicroBatches`)
over the fakes, without gRPC: what ``LatestOffsets``, ``PlanPartitions`` and
``Commit`` do between parsing a request and answering it."""

from __future__ import annotations

import pytest

from multikafka.coordinator.planning.batches import MicroBatches, TaskPlan
from multikafka.core._offsets import EMPTY, as_offsets
from multikafka.core.exceptions import PreconditionError
from multikafka.devstack.stack import stream_doc
from multikafka.v1 import planner_pb2
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.planning.batches",
    "multikafka.core._offsets",
)


A, B = "h:1", "h:2"
DAY_MS = 86_400_000


async def _stream(parts: Parts, *, with_b: bool = True) -> None:
    for bootstrap in (A, B):
        cluster = parts.kafka.cluster(bootstrap)
        for p in (0, 1):
            cluster.add_records("t", p, [1000 * (i + 1) for i in range(100)])
    clusters = {"a": (A, ["t"]), "b": (B, ["t"])} if with_b else {"a": (A, ["t"])}
    await parts.put(stream_doc("s", clusters, removed_cluster_retention_ms=DAY_MS))


async def test_new_splits_enter_then_advance_within_the_budget(parts: Parts) -> None:
    await _stream(parts, with_b=False)
    view = parts.store.get("s")

    first = await parts.batches.latest(
        view, "q", EMPTY, max_records=None, cap=None, fail_on_data_loss=True
    )
    assert first.end == {"a/t/0": 0, "a/t/1": 0}  # entered at earliest, nothing read yet
    assert first.entered == ["a/t/0", "a/t/1"]

    second = await parts.batches.latest(
        view, "q", first.end, max_records=50, cap=None, fail_on_data_loss=True
    )
    assert second.end == {"a/t/0": 25, "a/t/1": 25}  # shares of the backlog
    assert second.available == {"a/t/0": 100, "a/t/1": 100}
    assert parts.sample("multikafka_records_planned_total", stream="s", cluster="a") == 50
    assert parts.sample("multikafka_lag_records", stream="s", cluster="a") == 200


async def test_a_removed_cluster_is_remembered_and_resumed_with_history(parts: Parts) -> None:
    await _stream(parts)
    start = as_offsets({"a/t/0": 10, "a/t/1": 10, "b/t/0": 30, "b/t/1": 40})
    await parts.put(stream_doc("s", {"a": (A, ["t"])}, removed_cluster_retention_ms=DAY_MS))

    gone = await parts.batches.latest(
        parts.store.get("s"), "q", start, max_records=None, cap=None, fail_on_data_loss=True
    )
    assert set(gone.end) == {"a/t/0", "a/t/1"}
    progress = parts.queries.get("q")
    assert progress is not None
    assert progress.removed["b"].offsets == {"b/t/0": 30, "b/t/1": 40}
    assert "retired" in parts.kinds()

    await _stream(parts)  # b is back
    back = await parts.batches.latest(
        parts.store.get("s"), "q", gone.end, max_records=None, cap=None, fail_on_data_loss=True
    )
    assert {s: back.end[s] for s in ("b/t/0", "b/t/1")} == {"b/t/0": 30, "b/t/1": 40}
    assert "resumed" in parts.kinds()


async def test_plan_abandons_ranges_of_a_failed_cluster(parts: Parts) -> None:
    await _stream(parts)
    await parts.put(
        stream_doc(
            "s",
            {"a": (A, ["t"]), "b": (B, ["t"])},
            states={"b": "FAILED"},
            removed_cluster_retention_ms=DAY_MS,
        )
    )
    start = as_offsets({"a/t/0": 0, "a/t/1": 0, "b/t/0": 5})
    end = as_offsets({"a/t/0": 10, "a/t/1": 0, "b/t/0": 9})

    plan = await parts.batches.plan(
        parts.store.get("s"),
        "q",
        start,
        end,
        min_partitions=0,
        max_records_per_partition=None,
        parallelism=0,
    )
    assert [c.cluster for c in plan.connections] == ["a"]
    assert (plan.start.tolist(), plan.until.tolist(), plan.task_ranges.tolist()) == (
        [0],
        [10],
        [1],
    )
    assert "abandoned" in parts.kinds()
    progress = parts.queries.get("q")
    assert progress is not None
    assert progress.abandoned == {"b/t/0": 5}


async def test_secrets_go_only_to_authenticated_readers(parts: Parts) -> None:
    await _stream(parts, with_b=False)
    doc = stream_doc("s", {"a": (A, ["t"])})
    doc["clusters"]["a"]["properties"]["sasl.password"] = "s3cret"
    await parts.put(doc)
    view, start, end = parts.store.get("s"), as_offsets({"a/t/0": 0}), as_offsets({"a/t/0": 5})

    async def plan(batches: MicroBatches) -> TaskPlan:
        return await batches.plan(
            view, "q", start, end, min_partitions=0, max_records_per_partition=None, parallelism=0
        )

    # The test configuration has no reader token and no client CA.
    with pytest.raises(PreconditionError, match="authenticated readers"):
        await plan(parts.batches)
    (connection,) = (await plan(with_secrets(parts))).connections
    assert connection.properties.as_librdkafka_dict()["sasl.password"] == "s3cret"


async def test_resolve_and_commit(parts: Parts) -> None:
    await _stream(parts, with_b=False)
    view = parts.store.get("s")
    latest = await parts.batches.resolve(
        view, planner_pb2.Position(kind=planner_pb2.Position.LATEST)
    )
    assert latest == {"a/t/0": 100, "a/t/1": 100}

    await parts.batches.commit(view, "q", latest, group_id="g")
    progress = parts.queries.get("q")
    assert progress is not None
    assert progress.offsets == latest
    assert parts.kafka.cluster(A).commits["g"] == {("t", 0): 100, ("t", 1): 100}


def with_secrets(parts: Parts) -> MicroBatches:
    """The term's use cases as a coordinator with reader credentials (a
    reader token or client certificates) builds them."""
    d = parts.duties
    return MicroBatches(
        d.discovery,
        d.watermarks,
        d.entry,
        d.queries,
        d.abandonments,
        d.history,
        d.metrics,
        hand_out_secrets=True,
    )
