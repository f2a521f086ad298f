"""A typed client of the coordinator's Planner service (the driver side of the Spark
source uses it).

Every call is idempotent, so calls that find the coordinator unavailable (it
restarts, or a new leader takes over) are retried until a deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import grpc

from multikafka_core import offsets as ov
from multikafka_core import transport
from multikafka_core.exceptions import UnavailableError
from multikafka_core.grpc_codes import from_rpc_error
from multikafka_core.retry import Backoff, retry
from multikafka_core.v1 import planner_pb2, planner_pb2_grpc

logger = logging.getLogger(__name__)

T = TypeVar("T")
_RETRY = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
_BACKOFF = Backoff(first_s=0.1, max_s=2.0)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.Call) and exc.code() in _RETRY


class PlannerClient:
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 60.0,
        tls_ca: str = "",
        call_timeout_s: float = 30.0,
    ) -> None:
        self.address = address
        self._timeout_s = timeout_s
        self._call_timeout_s = call_timeout_s
        self._tls_ca = tls_ca
        self._channel: grpc.Channel | None = None
        self._stub: planner_pb2_grpc.PlannerStub | None = None

    def _planner(self) -> planner_pb2_grpc.PlannerStub:
        if self._stub is None:
            self._channel = transport.channel(self.address, tls_ca=transport.read_ca(self._tls_ca))
            self._stub = planner_pb2_grpc.PlannerStub(self._channel)
        return self._stub

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return retry(
                fn,
                on=(grpc.RpcError,),
                when=_retryable,
                deadline_s=self._timeout_s,
                backoff=_BACKOFF,
                on_retry=lambda exc, delay: logger.warning(
                    "coordinator %s unavailable for %s; retrying", self.address, what
                ),
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, f"coordinator {self.address}: {what}") from exc

    def resolve(self, stream: str, position: planner_pb2.Position) -> tuple[ov.OffsetVector, int]:
        req = planner_pb2.ResolveOffsetsRequest(stream=stream, position=position)
        resp = self._call(
            "resolve offsets",
            lambda: self._planner().ResolveOffsets(req, timeout=self._call_timeout_s),
        )
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
        resp = self._call(
            "latest offsets",
            lambda: self._planner().LatestOffsets(req, timeout=self._call_timeout_s),
        )
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
        return self._call(
            "plan partitions",
            lambda: self._planner().PlanPartitions(req, timeout=self._call_timeout_s),
        )

    def commit(self, stream: str, query_id: str, end: ov.OffsetVector, group_id: str) -> None:
        req = planner_pb2.CommitRequest(
            stream=stream, query_id=query_id, end=ov.splits_of(end), group_id=group_id
        )
        try:
            self._call("commit", lambda: self._planner().Commit(req, timeout=self._call_timeout_s))
        except UnavailableError:
            # Progress reporting must not fail a batch Spark already committed.
            logger.warning("could not report commit to coordinator %s", self.address)
