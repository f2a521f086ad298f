"""A typed client of the coordinator's Admin service (used by the CLI, the
demo and the tests). Failed calls raise :class:`MultikafkaError` subclasses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from multikafka.core.transport import ConnectConfig, Coordinators, read_pem
from multikafka.v1 import admin_pb2, admin_pb2_grpc

R = TypeVar("R")


class AdminClient:
    """``address``: one ``host:port`` or several (comma-separated); calls go to
    the leader, following a standby's pointer. ``tls_ca`` is a PEM file."""

    def __init__(
        self,
        address: str | ConnectConfig,
        *,
        token: str = "",
        tls_ca: str = "",
        timeout_s: float = 30.0,
    ) -> None:
        config = (
            address
            if isinstance(address, ConnectConfig)
            else ConnectConfig.parse(address, tls_ca=read_pem(tls_ca), token=token)
        )
        self.address = str(config)
        self._coordinators = Coordinators(config)
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._coordinators.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        what: str,
        method: Callable[[admin_pb2_grpc.AdminStub], Callable[..., R]],
        request: Any,
    ) -> R:
        return self._coordinators.unary(
            what,
            admin_pb2_grpc.AdminStub,
            method,
            request,
            timeout_s=self._timeout_s,
            deadline_s=self._timeout_s,
        )

    def put_stream(
        self, document: str | dict[str, Any], expected_version: int = 0
    ) -> admin_pb2.StreamInfo:
        text = document if isinstance(document, str) else json.dumps(document)
        req = admin_pb2.PutStreamRequest(document_json=text, expected_version=expected_version)
        return self._call("put stream", lambda s: s.PutStream, req)

    def get_stream(self, name: str) -> admin_pb2.StreamInfo:
        return self._call(
            "get stream", lambda s: s.GetStream, admin_pb2.GetStreamRequest(name=name)
        )

    def list_streams(self) -> list[admin_pb2.StreamInfo]:
        return list(
            self._call(
                "list streams", lambda s: s.ListStreams, admin_pb2.ListStreamsRequest()
            ).streams
        )

    def delete_stream(self, name: str) -> bool:
        resp = self._call(
            "delete stream", lambda s: s.DeleteStream, admin_pb2.DeleteStreamRequest(name=name)
        )
        return bool(resp.deleted)

    def history(self, name: str, limit: int = 0) -> list[admin_pb2.HistoryEntry]:
        req = admin_pb2.StreamHistoryRequest(name=name, limit=limit)
        return list(self._call("stream history", lambda s: s.StreamHistory, req).entries)

    def drain(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("drain cluster", lambda s: s.DrainCluster, req)

    def fail(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("fail cluster", lambda s: s.FailCluster, req)

    def activate(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("activate cluster", lambda s: s.ActivateCluster, req)

    def failover(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: str = "timestamp",
        margin_ms: int | None = None,
        reason: str = "",
        dry_run: bool = False,
    ) -> admin_pb2.StreamInfo:
        """Fail ``stream`` over; ``dry_run``: change nothing, answer where each
        query's new splits would start (``StreamInfo.translations``)."""
        req = admin_pb2.FailoverRequest(
            stream=stream,
            from_cluster=from_cluster,
            to_cluster=to_cluster,
            strategy=strategy,
            reason=reason,
            dry_run=dry_run,
        )
        if margin_ms is not None:
            req.margin_ms = margin_ms
        return self._call("failover", lambda s: s.Failover, req)

    def readers(self) -> list[admin_pb2.ReaderInfo]:
        return list(
            self._call(
                "list readers", lambda s: s.ListReaders, admin_pb2.ListReadersRequest()
            ).readers
        )

    def assignments(self, stream: str) -> list[admin_pb2.Assignment]:
        req = admin_pb2.ListAssignmentsRequest(stream=stream)
        return list(self._call("list assignments", lambda s: s.ListAssignments, req).assignments)

    def queries(self) -> list[admin_pb2.QueryInfo]:
        return list(
            self._call(
                "list queries", lambda s: s.ListQueries, admin_pb2.ListQueriesRequest()
            ).queries
        )

    def grants(self) -> admin_pb2.ListGrantsResponse:
        """Who the caller is, and its grants (an admin: everyone's)."""
        return self._call("list grants", lambda s: s.ListGrants, admin_pb2.ListGrantsRequest())

    def status(self) -> admin_pb2.StatusResponse:
        """The role of the replica reached, the leader, etcd, the replicas."""
        return self._call("status", lambda s: s.Status, admin_pb2.StatusRequest())
