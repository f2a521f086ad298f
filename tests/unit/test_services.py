"""The gRPC services over the fakes, without a server or a coordinator
process: each is built from what it calls (a term's use case, or a standby's
refusal; the store; reports and status), so a method is its request, one
call, and its response. Also the Admin's use cases and reports on a leader
and on a standby."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import grpc
import pytest

from multikafka.coordinator.api.admin import AdminService
from multikafka.coordinator.api.planner import PlannerService
from multikafka.coordinator.operations.replica_status import EtcdHealth, ReplicaStatus
from multikafka.coordinator.operations.reports import StandbyReports
from multikafka.core import _offsets as ov
from multikafka.core._grpc_codes import LEADER_KEY
from multikafka.core.exceptions import NotLeaderError
from multikafka.devstack.stack import stream_doc
from multikafka.v1 import admin_pb2, planner_pb2
from tests.fakes import Parts

INTERNALS = (
    "multikafka.coordinator.api.admin",
    "multikafka.coordinator.api.planner",
    "multikafka.coordinator.operations.replica_status",
    "multikafka.coordinator.operations.reports",
    "multikafka.core._grpc_codes",
    "multikafka.core._offsets",
)


A = "h:1"


class Aborted(Exception):
    pass


class Context:
    """What a method's error handling uses of a ``ServicerContext``."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: Any = ()

    async def abort(
        self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()
    ) -> NoReturn:
        self.code, self.details, self.trailing = code, details, trailing_metadata
        raise Aborted


def standby() -> NoReturn:
    raise NotLeaderError("leader:7")


class Replica:
    async def status(self) -> ReplicaStatus:
        return ReplicaStatus("standby", "leader:7", "me", "me:1", EtcdHealth(["e:1"], "e:1"), 9, 0)


async def _stream(parts: Parts) -> None:
    cluster = parts.kafka.cluster(A)
    for p in (0, 1):
        cluster.add_records("t", p, [1000 * (i + 1) for i in range(10)])
    await parts.put(stream_doc("s", {"a": (A, ["t"])}))


async def test_latest_offsets_is_one_call_of_the_terms_micro_batches(parts: Parts) -> None:
    await _stream(parts)
    service = PlannerService(lambda: parts.batches, parts.store)
    request = planner_pb2.LatestOffsetsRequest(
        stream="s", query_id="q", start=ov.to_columns({"a/t/0": 0, "a/t/1": 0}), max_records=4
    )
    answer = await service.LatestOffsets(request, Context())  # type: ignore[arg-type]
    assert ov.from_columns(answer.end) == {"a/t/0": 2, "a/t/1": 2}
    assert ov.from_columns(answer.available) == {"a/t/0": 10, "a/t/1": 10}
    assert answer.generation == parts.store.get("s").generation


async def test_latest_offsets_plans_the_tasks_and_records_the_commit_it_carries(
    parts: Parts,
) -> None:
    """One round trip per micro-batch: the tasks are those PlanPartitions
    answers for the same batch, and the commit is recorded first."""
    await _stream(parts)
    service = PlannerService(lambda: parts.batches, parts.store)
    start = {"a/t/0": 2, "a/t/1": 2}
    request = planner_pb2.LatestOffsetsRequest(
        stream="s",
        query_id="q",
        start=ov.to_columns(start),
        tasks=planner_pb2.TaskOptions(parallelism=2),
        committed=ov.to_columns({"a/t/0": 1, "a/t/1": 2}),
        group_id="g",
    )
    answer = await service.LatestOffsets(request, Context())  # type: ignore[arg-type]
    end = ov.from_columns(answer.end)
    assert end == {"a/t/0": 10, "a/t/1": 10}
    alone = await service.PlanPartitions(
        planner_pb2.PlanPartitionsRequest(
            stream="s",
            query_id="q",
            start=ov.to_columns(start),
            end=answer.end,
            parallelism=2,
        ),
        Context(),  # type: ignore[arg-type]
    )
    assert answer.HasField("plan")
    assert answer.plan == alone
    assert len(answer.plan.tasks.task_ranges) == 2
    progress = parts.queries.get("q")
    assert progress is not None
    assert progress.offsets == {"a/t/0": 1, "a/t/1": 2}
    assert progress.group_id == "g"

    without = await service.LatestOffsets(
        planner_pb2.LatestOffsetsRequest(stream="s", query_id="q", start=answer.end),
        Context(),  # type: ignore[arg-type]
    )
    assert not without.HasField("plan")
    # Its start was the end it was answered: remembered, not decoded again.
    assert service.vectors.hits == 1
    context = Context()
    bad = planner_pb2.LatestOffsetsRequest(
        stream="s", query_id="q", tasks=planner_pb2.TaskOptions(min_partitions=-1)
    )
    with pytest.raises(Aborted):
        await service.LatestOffsets(bad, context)  # type: ignore[arg-type]
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_standby_refuses_naming_the_leader_before_reading_the_request(
    parts: Parts,
) -> None:
    service = PlannerService(standby, parts.store)
    context = Context()
    with pytest.raises(Aborted):
        # The stream does not exist and the query id is missing: the standby
        # still answers UNAVAILABLE, as before.
        await service.LatestOffsets(planner_pb2.LatestOffsetsRequest(stream="x"), context)  # type: ignore[arg-type]
    assert context.code == grpc.StatusCode.UNAVAILABLE
    assert (LEADER_KEY, "leader:7") in context.trailing


async def test_admin_on_a_standby_reads_etcd_and_refuses_writes(parts: Parts) -> None:
    await _stream(parts)
    parts.history.record("s", "note", detail="written by the leader")
    await parts.history.flush()
    await parts.queries.commit("q", "s", {"a/t/0": 3})
    await parts.queries.flush()
    reports = StandbyReports(parts.store, parts.etcd, "/t", 200, lambda: "leader:7")
    service = AdminService(standby, lambda: reports, Replica())
    ctx: Any = Context()

    info = await service.GetStream(admin_pb2.GetStreamRequest(name="s"), ctx)
    (cluster,) = info.clusters
    assert (cluster.reachable, cluster.error) == (
        False,
        "unknown here: this replica is a standby (leader: leader:7)",
    )
    history = await service.StreamHistory(admin_pb2.StreamHistoryRequest(name="s"), ctx)
    assert "written by the leader" in [e.detail for e in history.entries]
    queries = await service.ListQueries(admin_pb2.ListQueriesRequest(), ctx)
    assert [(q.query_id, dict(q.offsets)) for q in queries.queries] == [("q", {"a/t/0": 3})]
    status = await service.Status(admin_pb2.StatusRequest(), ctx)
    assert (status.role, status.leader, list(status.etcd.endpoints)) == (
        "standby",
        "leader:7",
        ["e:1"],
    )

    with pytest.raises(Aborted):
        await service.DeleteStream(admin_pb2.DeleteStreamRequest(name="s"), ctx)
    assert ctx.code == grpc.StatusCode.UNAVAILABLE
    assert parts.store.find("s") is not None


async def test_admin_on_the_leader_describes_clusters_and_keeps_stored_secrets(
    parts: Parts,
) -> None:
    await _stream(parts)
    doc = stream_doc("s", {"a": (A, ["t"])})
    doc["clusters"]["a"]["properties"]["sasl.password"] = "s3cret"
    await parts.put(doc)
    service = AdminService(lambda: parts.operations, lambda: parts.reports, Replica())
    ctx: Any = Context()

    info = await service.GetStream(admin_pb2.GetStreamRequest(name="s"), ctx)
    (cluster,) = info.clusters
    assert (cluster.reachable, cluster.partitions) == (True, 2)
    shown = json.loads(info.document_json)
    assert shown["clusters"]["a"]["properties"]["sasl.password"] == "<redacted>"

    # Put back as read (redacted): the stored secret stays.
    shown["clusters"]["a"]["properties"]["socket.timeout.ms"] = "6000"
    request = admin_pb2.PutStreamRequest(document_json=json.dumps(shown))
    await service.PutStream(request, ctx)
    stored = parts.store.get("s").spec.clusters["a"].properties
    assert stored.as_librdkafka_dict()["sasl.password"] == "s3cret"
