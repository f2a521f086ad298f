"""The agent's coordinator link against a coordinator of an older version:
one without the Acknowledge method (a rolling upgrade that updates agents
first). The link acknowledges by heartbeat then, at once after each event."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from multikafka_core.transport import ConnectConfig
from multikafka_core.v1 import reader_pb2, reader_pb2_grpc
from reader_agent.link import CoordinatorLink
from tests.helpers import eventually


class OlderReader(reader_pb2_grpc.ReaderServicer):
    """Register, Subscribe (one event) and Heartbeat; no Acknowledge."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.second = threading.Event()
        self.done = threading.Event()

    def Register(self, request: Any, context: Any) -> reader_pb2.RegisterResponse:
        return reader_pb2.RegisterResponse(generation=7, heartbeat_interval_ms=60_000)

    def Subscribe(self, request: Any, context: Any) -> Iterator[reader_pb2.ReconcileEvent]:
        yield reader_pb2.ReconcileEvent(generation=7, snapshot=True)
        self.second.wait(30)
        yield reader_pb2.ReconcileEvent(generation=8)
        self.done.wait(30)

    def Heartbeat(self, request: Any, context: Any) -> reader_pb2.HeartbeatResponse:
        self.applied.append(request.applied_generation)
        return reader_pb2.HeartbeatResponse(known=True, generation=7)


@pytest.fixture
def older() -> Iterator[tuple[OlderReader, str]]:
    servicer = OlderReader()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {
        name: handler
        for name, handler in {
            "Register": grpc.unary_unary_rpc_method_handler(
                servicer.Register,
                request_deserializer=reader_pb2.RegisterRequest.FromString,
                response_serializer=reader_pb2.RegisterResponse.SerializeToString,
            ),
            "Subscribe": grpc.unary_stream_rpc_method_handler(
                servicer.Subscribe,
                request_deserializer=reader_pb2.SubscribeRequest.FromString,
                response_serializer=reader_pb2.ReconcileEvent.SerializeToString,
            ),
            "Heartbeat": grpc.unary_unary_rpc_method_handler(
                servicer.Heartbeat,
                request_deserializer=reader_pb2.HeartbeatRequest.FromString,
                response_serializer=reader_pb2.HeartbeatResponse.SerializeToString,
            ),
        }.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("multikafka.v1.Reader", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    servicer.done.set()
    server.stop(0)


def test_without_acknowledge_the_link_acknowledges_by_heartbeat(
    older: tuple[OlderReader, str],
) -> None:
    servicer, address = older
    events: list[int] = []
    link = CoordinatorLink(
        ConnectConfig.parse(address),
        "agent-1",
        lambda event: events.append(event.generation),
        lambda: (max(events, default=0), []),
        heartbeat_interval_s=60.0,
        retry_s=0.05,
    )
    link.start()
    try:
        # The first heartbeat is due in 60 s: these are acknowledgements.
        eventually(lambda: 7 in servicer.applied, timeout_s=10)
        servicer.second.set()
        eventually(lambda: 8 in servicer.applied, timeout_s=10)
        assert events == [7, 8]
        # It fell back once: no more calls, no heartbeat until one is due.
        time.sleep(1.0)
        assert len(servicer.applied) <= 3, servicer.applied
    finally:
        link.close()
