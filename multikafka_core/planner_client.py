"""A typed client of the coordinator's Planner service (the driver side of the Spark
source uses it).

Every call is idempotent, so calls that find the coordinator unavailable (it
restarts, or a new leader takes over) are retried until a deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from multikafka_core import offsets as ov
from multikafka_core.exceptions import UnavailableError
from multikafka_core.transport import ConnectConfig, Coordinators
from multikafka_core.v1 import planner_pb2, planner_pb2_grpc

logger = logging.getLogger(__name__)


R = TypeVar("R")


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

    def _call(
        self,
        what: str,
        method: Callable[[planner_pb2_grpc.PlannerStub], Callable[..., R]],
        request: Any,
    ) -> R:
        if self._coordinators is None:
            self._coordinators = Coordinators(self.config)

        return self._coordinators.unary(
            what,
            planner_pb2_grpc.PlannerStub,
            method,
            request,
            timeout_s=self._call_timeout_s,
            deadline_s=self._timeout_s,
        )

    def resolve(self, stream: str, position: planner_pb2.Position) -> tuple[ov.OffsetVector, int]:
        req = planner_pb2.ResolveOffsetsRequest(stream=stream, position=position)
        resp = self._call("resolve offsets", lambda s: s.ResolveOffsets, req)
        return ov.canonical(resp.offsets), resp.generation

    def latest(
        self,
        stream: str,
        query_id: str,
        start: ov.OffsetVector,
        *,
        max_records: int,
        cap: ov.OffsetVector | None,
        fail_on_data_loss: bool,
    ) -> ov.OffsetVector:
        req = planner_pb2.LatestOffsetsRequest(
            stream=stream,
            query_id=query_id,
            start=ov.splits_of(start),
            max_records=max_records,
            cap=ov.splits_of(cap or {}),
            fail_on_data_loss=fail_on_data_loss,
        )
        resp = self._call("latest offsets", lambda s: s.LatestOffsets, req)
        return ov.canonical(resp.end)

    def plan(
        self,
        stream: str,
        query_id: str,
        start: ov.OffsetVector,
        end: ov.OffsetVector,
        *,
        min_partitions: int,
        max_records_per_partition: int,
    ) -> planner_pb2.PlanPartitionsResponse:
        req = planner_pb2.PlanPartitionsRequest(
            stream=stream,
            query_id=query_id,
            start=ov.splits_of(start),
            end=ov.splits_of(end),
            min_partitions=min_partitions,
            max_records_per_partition=max_records_per_partition,
        )
        return self._call("plan partitions", lambda s: s.PlanPartitions, req)

    def commit(self, stream: str, query_id: str, end: ov.OffsetVector, group_id: str) -> None:
        req = planner_pb2.CommitRequest(
            stream=stream, query_id=query_id, end=ov.splits_of(end), group_id=group_id
        )
        try:
            self._call("commit", lambda s: s.Commit, req)
        except UnavailableError:
            # Progress reporting must not fail a batch Spark already committed.
            logger.warning("could not report commit to coordinator %s", self.address)
