"""A typed client of the coordinator's Admin service (used by the CLI, the
demo and the tests). Failed calls raise :class:`MultikafkaError` subclasses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from multikafka_core import transport
from multikafka_core.grpc_codes import from_rpc_error
from multikafka_core.v1 import admin_pb2, admin_pb2_grpc

T = TypeVar("T")


class AdminClient:
    def __init__(
        self, address: str, *, token: str = "", tls_ca: str = "", timeout_s: float = 30.0
    ) -> None:
        self.address = address
        self._channel = transport.channel(address, tls_ca=transport.read_ca(tls_ca))
        self._stub = admin_pb2_grpc.AdminStub(self._channel)
        self._metadata = transport.bearer(token)
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, what: str, method: Callable[..., T], request: Any) -> T:
        try:
            return method(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, what) from exc

    def put_stream(
        self, document: str | dict[str, Any], expected_version: int = 0
    ) -> admin_pb2.StreamInfo:
        text = document if isinstance(document, str) else json.dumps(document)
        req = admin_pb2.PutStreamRequest(document_json=text, expected_version=expected_version)
        return self._call("put stream", self._stub.PutStream, req)

    def get_stream(self, name: str) -> admin_pb2.StreamInfo:
        return self._call("get stream", self._stub.GetStream, admin_pb2.GetStreamRequest(name=name))

    def list_streams(self) -> list[admin_pb2.StreamInfo]:
        return list(
            self._call(
                "list streams", self._stub.ListStreams, admin_pb2.ListStreamsRequest()
            ).streams
        )

    def delete_stream(self, name: str) -> bool:
        resp = self._call(
            "delete stream", self._stub.DeleteStream, admin_pb2.DeleteStreamRequest(name=name)
        )
        return bool(resp.deleted)

    def history(self, name: str, limit: int = 0) -> list[admin_pb2.HistoryEntry]:
        req = admin_pb2.StreamHistoryRequest(name=name, limit=limit)
        return list(self._call("stream history", self._stub.StreamHistory, req).entries)

    def drain(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("drain cluster", self._stub.DrainCluster, req)

    def fail(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("fail cluster", self._stub.FailCluster, req)

    def activate(self, stream: str, cluster: str) -> admin_pb2.StreamInfo:
        req = admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
        return self._call("activate cluster", self._stub.ActivateCluster, req)

    def failover(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: str = "timestamp",
        margin_ms: int | None = None,
        reason: str = "",
    ) -> admin_pb2.StreamInfo:
        req = admin_pb2.FailoverRequest(
            stream=stream,
            from_cluster=from_cluster,
            to_cluster=to_cluster,
            strategy=strategy,
            reason=reason,
        )
        if margin_ms is not None:
            req.margin_ms = margin_ms
        return self._call("failover", self._stub.Failover, req)

    def readers(self) -> list[admin_pb2.ReaderInfo]:
        return list(
            self._call(
                "list readers", self._stub.ListReaders, admin_pb2.ListReadersRequest()
            ).readers
        )

    def assignments(self, stream: str) -> list[admin_pb2.Assignment]:
        req = admin_pb2.ListAssignmentsRequest(stream=stream)
        return list(self._call("list assignments", self._stub.ListAssignments, req).assignments)

    def queries(self) -> list[admin_pb2.QueryInfo]:
        return list(
            self._call(
                "list queries", self._stub.ListQueries, admin_pb2.ListQueriesRequest()
            ).queries
        )
