"""The Reader service's registration: every method of the proto, and
reconcile events sent as the bytes they were serialized to once."""

from __future__ import annotations

from coordinator.reader_service import ReaderService, method_handlers
from multikafka_core.v1 import reader_pb2


def test_every_method_of_the_proto_is_registered() -> None:
    handlers = method_handlers(ReaderService(None, 2.0))  # type: ignore[arg-type]
    service = reader_pb2.DESCRIPTOR.services_by_name["Reader"]
    assert set(handlers) == set(service.methods_by_name)
    for name, method in service.methods_by_name.items():
        assert handlers[name].response_streaming == method.server_streaming
        assert handlers[name].request_streaming == method.client_streaming


def test_subscribe_sends_serialized_events_as_they_are() -> None:
    serialize = method_handlers(ReaderService(None, 2.0))["Subscribe"].response_serializer  # type: ignore[arg-type]
    assert serialize is not None
    event = reader_pb2.ReconcileEvent(generation=5, snapshot=True)
    payload = event.SerializeToString()
    assert serialize(payload) is payload
    assert serialize(event) == payload
