"""The agent's coordinator link against a coordinator of an older version:
one without the Acknowledge method (a rolling upgrade that updates agents
first). The link acknowledges by heartbeat then, at once after each event."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent._link import CoordinatorLink
from multikafka.v1 import reader_pb2, reader_pb2_grpc
from tests.helpers import eventually

INTERNALS = ("multikafka.reader_agent._link",)


class FakeReader(reader_pb2_grpc.ReaderServicer):
    """Register, Subscribe (two events), Heartbeat and, unless it plays an
    older coordinator, Acknowledge."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.acked: list[int] = []
        self.second = threading.Event()
        self.done = threading.Event()
        self.registered = 0
        #: Acknowledge calls to fail after their first acknowledgement.
        self.break_acks = 0
        self.reports: list[reader_pb2.ReportReadsRequest] = []

    def Register(self, request: Any, context: Any) -> reader_pb2.RegisterResponse:
        self.registered += 1
        return reader_pb2.RegisterResponse(generation=7, heartbeat_interval_ms=60_000)

    def Subscribe(self, request: Any, context: Any) -> Iterator[reader_pb2.ReconcileEvent]:
        yield reader_pb2.ReconcileEvent(generation=7, snapshot=True)
        self.second.wait(30)
        yield reader_pb2.ReconcileEvent(generation=8)
        self.done.wait(30)

    def Heartbeat(self, request: Any, context: Any) -> reader_pb2.HeartbeatResponse:
        self.applied.append(request.applied_generation)
        return reader_pb2.HeartbeatResponse(known=True, generation=7)

    def ReportReads(self, request: Any, context: Any) -> reader_pb2.ReportReadsResponse:
        self.reports.append(request)
        return reader_pb2.ReportReadsResponse()

    def Acknowledge(self, requests: Any, context: Any) -> reader_pb2.AckResponse:
        for ack in requests:
            self.acked.append(ack.applied_generation)
            if self.break_acks:
                self.break_acks -= 1
                context.abort(grpc.StatusCode.INTERNAL, "broken on purpose")
        return reader_pb2.AckResponse()


def _serve(with_ack: bool) -> Iterator[tuple[FakeReader, str]]:
    servicer = FakeReader()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handlers = {
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
        "ReportReads": grpc.unary_unary_rpc_method_handler(
            servicer.ReportReads,
            request_deserializer=reader_pb2.ReportReadsRequest.FromString,
            response_serializer=reader_pb2.ReportReadsResponse.SerializeToString,
        ),
    }
    if with_ack:
        handlers["Acknowledge"] = grpc.stream_unary_rpc_method_handler(
            servicer.Acknowledge,
            request_deserializer=reader_pb2.AckRequest.FromString,
            response_serializer=reader_pb2.AckResponse.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("multikafka.v1.Reader", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    servicer.second.set()
    servicer.done.set()
    server.stop(0)


@pytest.fixture
def older() -> Iterator[tuple[FakeReader, str]]:
    yield from _serve(with_ack=False)


@pytest.fixture
def current() -> Iterator[tuple[FakeReader, str]]:
    yield from _serve(with_ack=True)


def _link(address: str, events: list[int]) -> CoordinatorLink:
    return CoordinatorLink(
        ConnectConfig.parse(address),
        "agent-1",
        lambda event: events.append(event.generation),
        lambda: (max(events, default=0), []),
        heartbeat_interval_s=60.0,
        retry_s=0.05,
    )


def test_without_acknowledge_the_link_acknowledges_by_heartbeat(
    older: tuple[FakeReader, str],
) -> None:
    """Falls back once, and acknowledges every event by an immediate heartbeat."""
    servicer, address = older
    events: list[int] = []
    link = _link(address, events)
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


def test_acknowledgements_go_on_the_held_call_and_close_quietly(
    current: tuple[FakeReader, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each event is acknowledged on the Acknowledge call (no heartbeat is
    due for 60 s); closing cancels that call, which is not an error."""
    servicer, address = current
    events: list[int] = []
    link = _link(address, events)
    link.start()
    try:
        eventually(lambda: 7 in servicer.acked, timeout_s=10)
        servicer.second.set()
        eventually(lambda: 8 in servicer.acked, timeout_s=10)
    finally:
        link.close()
    assert servicer.applied == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_each_event_is_acknowledged_after_it_was_applied(
    current: tuple[FakeReader, str],
) -> None:
    """The acknowledgement of an event is written once it was applied, by
    the thread that applied it (no hand-over), and only then."""
    servicer, address = current
    events: list[int] = []
    seen_acks: list[list[int]] = []

    def on_event(event: reader_pb2.ReconcileEvent) -> None:
        seen_acks.append(list(servicer.acked))  # what was acknowledged before applying
        events.append(event.generation)

    link = CoordinatorLink(
        ConnectConfig.parse(address),
        "agent-1",
        on_event,
        lambda: (max(events, default=0), []),
        heartbeat_interval_s=60.0,
        retry_s=0.05,
    )
    link.start()
    try:
        eventually(lambda: servicer.acked == [7], timeout_s=10)
        servicer.second.set()
        eventually(lambda: servicer.acked == [7, 8], timeout_s=10)
    finally:
        link.close()
    assert events == [7, 8]
    assert seen_acks == [[], [7]]
    assert servicer.applied == []  # no heartbeat did it


def test_a_broken_acknowledge_call_subscribes_again(
    current: tuple[FakeReader, str],
) -> None:
    """The Acknowledge call and the subscription live together: when the
    call breaks the link registers and subscribes again (a new snapshot)
    and acknowledges on a new call."""
    servicer, address = current
    servicer.break_acks = 1
    events: list[int] = []
    link = _link(address, events)
    link.start()
    try:
        eventually(lambda: servicer.registered >= 2 and servicer.acked.count(7) >= 2, timeout_s=10)
        servicer.second.set()
        eventually(lambda: 8 in servicer.acked, timeout_s=10)
    finally:
        link.close()
    assert events[-1] == 8
    assert servicer.applied == []


def test_after_subscribing_anew_the_recent_reports_are_sent_again(
    current: tuple[FakeReader, str],
) -> None:
    """A new leader may lack the read marks its predecessor had not written
    to etcd yet: after the subscription broke and was made again, the
    reports of the last RESEND_S go again (only then)."""
    servicer, address = current
    events: list[int] = []
    link = _link(address, events)
    link.start()
    try:
        eventually(lambda: 7 in servicer.acked, timeout_s=10)
        mark = reader_pb2.ReadMark(split="a/t/0", last_offset=4, next_offset=5)
        link.report(reader_pb2.ReportReadsRequest(stream="s", query_id="q", marks=[mark]))
        eventually(lambda: len(servicer.reports) == 1, timeout_s=10)
        time.sleep(0.5)
        assert len(servicer.reports) == 1  # sent once while the subscription holds
        servicer.break_acks = 1  # the subscription breaks: the link subscribes again
        servicer.second.set()
        eventually(lambda: servicer.registered >= 2 and len(servicer.reports) == 2, timeout_s=10)
    finally:
        link.close()
    assert servicer.reports[1] == servicer.reports[0]
    assert servicer.reports[1].agent_id == "agent-1"
