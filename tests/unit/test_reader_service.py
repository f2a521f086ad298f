"""The Reader service's registration: every method of the proto, reconcile
events sent as the bytes they were serialized to once, and the counters
agents push in heartbeats."""

from __future__ import annotations

from multikafka.coordinator.api.reader import ReaderService, method_handlers
from multikafka.devstack.stack import stream_doc
from multikafka.v1 import reader_pb2
from tests.fakes import Parts

INTERNALS = ("multikafka.coordinator.api.reader",)


def test_every_method_of_the_proto_is_registered() -> None:
    handlers = method_handlers(ReaderService(None, None, 2.0))  # type: ignore[arg-type]
    service = reader_pb2.DESCRIPTOR.services_by_name["Reader"]
    assert set(handlers) == set(service.methods_by_name)
    for name, method in service.methods_by_name.items():
        assert handlers[name].response_streaming == method.server_streaming
        assert handlers[name].request_streaming == method.client_streaming


def test_subscribe_sends_serialized_events_as_they_are() -> None:
    serialize = method_handlers(ReaderService(None, None, 2.0))["Subscribe"].response_serializer  # type: ignore[arg-type]
    assert serialize is not None
    event = reader_pb2.ReconcileEvent(generation=5, snapshot=True)
    payload = event.SerializeToString()
    assert serialize(payload) is payload
    assert serialize(event) == payload


async def test_heartbeats_feed_malformed_record_counters_by_mode(parts: Parts) -> None:
    """Agents push running totals; the coordinator counts what is new, per
    (stream, cluster, mode), and creates no series for a mode never seen."""
    await parts.put(stream_doc("s", {"a": ("h:1", ["t"])}))
    await parts.registry.register("agent", "host", 1)
    service = ReaderService(lambda: parts.link, parts.store, 2.0)

    async def beat(**counters: int) -> None:
        stats = reader_pb2.SubReaderStats(stream="s", cluster="a", **counters)
        request = reader_pb2.HeartbeatRequest(agent_id="agent", sub_readers=[stats])
        assert (await service.Heartbeat(request, None)).known  # type: ignore[arg-type]

    def malformed(mode: str) -> float | None:
        return parts.sample(
            "multikafka_agent_malformed_records_total", stream="s", cluster="a", mode=mode
        )

    await beat(records_read=10, malformed_records=3)
    await beat(records_read=20, malformed_records=5, corrupt_records=2, malformed_failures=1)
    await beat(records_read=20, malformed_records=5, corrupt_records=2, malformed_failures=1)
    assert malformed("DROPMALFORMED") == 5
    assert malformed("PERMISSIVE") == 2
    assert malformed("FAILFAST") == 1
    assert parts.sample("multikafka_agent_records_read_total", stream="s", cluster="a") == 20

    parts.metrics.forget_cluster("s", "a")
    assert malformed("DROPMALFORMED") is None
