"""A typed client of the coordinator's Planner service (the driver side of the Spark
source uses it).

Every call is idempotent, so calls that find the coordinator unavailable (it
restarts, or a new leader takes over) are retried until a deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from multikafka.core import _offsets as ov
from multikafka.core import _ranges as ranges
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import UnavailableError
from multikafka.core.model import Connection
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.v1 import planner_pb2, planner_pb2_grpc

logger = logging.getLogger(__name__)


R = TypeVar("R")
#: LatestOffsets over a stream kept open (once per micro-batch: see Coordinators.exchange).
LATEST_OFFSETS_STREAM = "/multikafka.v1.Planner/LatestOffsetsStream"


class Plan(NamedTuple):
    """What ``PlanPartitions`` answers: the tasks of a micro-batch."""

    #: Each task's ranges.
    tasks: ranges.Tasks
    #: How to reach the clusters the tasks read (properties hold secrets).
    clusters: dict[str, Connection]
    #: The metadata generation the plan was made at.
    generation: int


class TaskOptions(NamedTuple):
    """How a micro-batch is cut into Spark tasks (0: unset or unknown)."""

    min_partitions: int = 0
    max_records_per_partition: int = 0
    #: The tasks Spark runs at once.
    parallelism: int = 0


class LatestOffsets(NamedTuple):
    """What ``LatestOffsets`` answers."""

    #: The end of the next micro-batch (within the read limit and cap).
    end: ov.SplitOffsets
    #: The end without the read limit and cap: what is available now.
    available: ov.SplitOffsets
    #: The tasks from the start to ``end``, when asked for.
    plan: Plan | None = None


class PlannerClient:
    """``config``: the coordinator's address(es), TLS and reader token; calls
    go to the leader and are retried for ``timeout_s`` (each attempt gets
    ``call_timeout_s``). The channel opens on first use."""

    def __init__(
        self,
        config: ConnectConfig | str,
        *,
        timeout_s: float = 60.0,
        call_timeout_s: float = 30.0,
    ) -> None:
        self.config = config if isinstance(config, ConnectConfig) else ConnectConfig.parse(config)
        self.address = str(self.config)
        self._timeout_s = timeout_s
        self._call_timeout_s = call_timeout_s
        self._coordinators: Coordinators | None = None

    def close(self) -> None:
        if self._coordinators is not None:
            self._coordinators.close()
        self._coordinators = None

    def _coordinators_(self) -> Coordinators:
        if self._coordinators is None:
            self._coordinators = Coordinators(self.config)
        return self._coordinators

    def _call(
        self,
        what: str,
        method: Callable[[planner_pb2_grpc.PlannerStub], Callable[..., R]],
        request: Any,
    ) -> R:
        return self._coordinators_().unary(
            what,
            planner_pb2_grpc.PlannerStub,
            method,
            request,
            timeout_s=self._call_timeout_s,
            deadline_s=self._timeout_s,
        )

    def resolve(
        self, stream: str, position: planner_pb2.Position, *, isolation_level: str = ""
    ) -> tuple[ov.SplitOffsets, int]:
        """The offsets ``position`` names, and the metadata generation; a
        cluster's latest offsets are its last stable ones where the readers
        read committed records (``isolation_level``, "": each cluster's own)."""
        req = planner_pb2.ResolveOffsetsRequest(
            stream=stream, position=position, isolation_level=isolation_level
        )
        resp = self._call("resolve offsets", lambda s: s.ResolveOffsets, req)
        return ov.from_columns(resp.offsets, "offsets"), resp.generation

    def latest(
        self,
        stream: str,
        query_id: str,
        start: Mapping[str, int],
        *,
        max_records: int,
        cap: Mapping[str, int] | None,
        fail_on_data_loss: bool,
        isolation_level: str = "",
    ) -> ov.SplitOffsets:
        """The end of the next micro-batch (:meth:`latest_offsets`' ``end``)."""
        return self.latest_offsets(
            stream,
            query_id,
            start,
            max_records=max_records,
            cap=cap,
            fail_on_data_loss=fail_on_data_loss,
            isolation_level=isolation_level,
        ).end

    def latest_offsets(
        self,
        stream: str,
        query_id: str,
        start: Mapping[str, int],
        *,
        max_records: int,
        cap: Mapping[str, int] | None,
        fail_on_data_loss: bool,
        tasks: TaskOptions | None = None,
        committed: Mapping[str, int] | None = None,
        group_id: str = "",
        isolation_level: str = "",
    ) -> LatestOffsets:
        """The end of the next micro-batch from ``start`` (at most
        ``max_records`` records, 0: no limit; never past ``cap``), and what
        is available now; with ``tasks``, also the batch's tasks (as
        :meth:`plan` would answer); ``committed`` (with ``group_id``): the
        end of the last batch Spark committed, recorded first as
        :meth:`commit` records it. A cluster whose readers read committed
        records (``isolation_level``, "": each cluster's own) is planned to
        its last stable offsets. One round trip."""
        req = planner_pb2.LatestOffsetsRequest(
            stream=stream,
            query_id=query_id,
            start=ov.to_columns(start),
            max_records=max_records,
            cap=ov.to_columns(cap or {}),
            fail_on_data_loss=fail_on_data_loss,
            committed=ov.to_columns(committed or {}),
            group_id=group_id if committed else "",
            isolation_level=isolation_level,
        )
        if tasks is not None:
            req.tasks.CopyFrom(planner_pb2.TaskOptions(**tasks._asdict()))
        resp = self._coordinators_().exchange(
            "latest offsets",
            LATEST_OFFSETS_STREAM,
            req,
            planner_pb2.LatestOffsetsResponse,
            lambda channel: planner_pb2_grpc.PlannerStub(channel).LatestOffsets,
            timeout_s=self._call_timeout_s,
            deadline_s=self._timeout_s,
        )
        return LatestOffsets(
            ov.from_columns(resp.end, "end"),
            ov.from_columns(resp.available, "available"),
            _plan_of(resp.plan) if resp.HasField("plan") else None,
        )

    def plan(
        self,
        stream: str,
        query_id: str,
        start: Mapping[str, int],
        end: Mapping[str, int],
        *,
        min_partitions: int = 0,
        max_records_per_partition: int = 0,
        parallelism: int = 0,
    ) -> Plan:
        """The tasks of the batch ``[start, end)``. ``min_partitions`` and
        ``max_records_per_partition`` 0 mean unset; ``parallelism`` is what
        Spark has (0: unknown)."""
        req = planner_pb2.PlanPartitionsRequest(
            stream=stream,
            query_id=query_id,
            start=ov.to_columns(start),
            end=ov.to_columns(end),
            min_partitions=min_partitions,
            max_records_per_partition=max_records_per_partition,
            parallelism=parallelism,
        )
        return _plan_of(self._call("plan partitions", lambda s: s.PlanPartitions, req))

    def commit(self, stream: str, query_id: str, end: Mapping[str, int], group_id: str) -> None:
        req = planner_pb2.CommitRequest(
            stream=stream, query_id=query_id, end=ov.to_columns(end), group_id=group_id
        )
        try:
            self._call("commit", lambda s: s.Commit, req)
        except UnavailableError:
            # Progress reporting must not fail a batch Spark already committed.
            logger.warning("could not report commit to coordinator %s", self.address)


def _plan_of(resp: planner_pb2.PlanPartitionsResponse) -> Plan:
    clusters = {
        c.cluster: Connection(c.cluster, c.bootstrap_servers, Properties(dict(c.properties)))
        for c in resp.clusters
    }
    return Plan(ranges.tasks_of(resp.tasks), clusters, resp.generation)
