"""LatestOffsets over a stream kept open (``Coordinators.exchange``): one
stream for many micro-batches, each request answered as the unary call
answers it, refusals and moves as for a unary call, a timeout, and an older
coordinator without the stream. Loopback gRPC servers, no etcd."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from multikafka.coordinator.api.rpc import ParseInterceptor, unary
from multikafka.core.exceptions import NotLeaderError, UnavailableError, ValidationError
from multikafka.core.planner_client import LATEST_OFFSETS_STREAM, PlannerClient
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.v1 import planner_pb2, planner_pb2_grpc
from tests.helpers import eventually_async

INTERNALS = ("multikafka.coordinator.api.rpc",)


Ctx = grpc.aio.ServicerContext[Any, Any]


class Replica(planner_pb2_grpc.PlannerServicer):
    """LatestOffsets answering ``end = start + 1`` per split, as the leader;
    or refusing as a standby naming ``leader``; a query id ``bad`` is
    refused as invalid, and while ``hold`` is set, requests wait for it."""

    def __init__(self) -> None:
        self.streams = 0
        self.unary_calls = 0
        self.requests = 0
        self.leader = ""  # "": this one leads
        self.hold: asyncio.Event | None = None

    @unary
    async def _answer(
        self, request: planner_pb2.LatestOffsetsRequest, context: Ctx
    ) -> planner_pb2.LatestOffsetsResponse:
        self.requests += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.leader:
            raise NotLeaderError(self.leader)
        if request.query_id == "bad":
            raise ValidationError("query_id", "'bad' is not a query id")
        end = planner_pb2.LatestOffsetsResponse()
        end.end.CopyFrom(request.start)
        end.end.offsets[:] = [o + 1 for o in request.start.offsets]
        return end

    async def LatestOffsets(
        self, request: planner_pb2.LatestOffsetsRequest, context: Ctx
    ) -> planner_pb2.LatestOffsetsResponse:
        self.unary_calls += 1
        return await self._answer(request, context)

    async def LatestOffsetsStream(
        self, request_iterator: AsyncIterator[planner_pb2.LatestOffsetsRequest], context: Ctx
    ) -> AsyncIterator[planner_pb2.LatestOffsetsResponse]:
        self.streams += 1
        async for request in request_iterator:
            yield await self._answer(request, context)


class OlderReplica(Replica):
    """A coordinator from before the stream: gRPC answers it UNIMPLEMENTED."""

    LatestOffsetsStream = planner_pb2_grpc.PlannerServicer.LatestOffsetsStream  # type: ignore[assignment]


async def _serve(replica: Replica, address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[ParseInterceptor("/multikafka.v1.")])
    planner_pb2_grpc.add_PlannerServicer_to_server(replica, server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def three() -> AsyncIterator[list[tuple[Replica, str]]]:
    """Two replicas, and an older coordinator without the stream."""
    kept = [Replica(), Replica(), OlderReplica()]
    served = [await _serve(r) for r in kept]
    yield [(r, address) for r, (_, address) in zip(kept, served, strict=True)]
    for server, _ in served:
        await server.stop(0)


def _latest(client: PlannerClient, query_id: str, start: dict[str, int]) -> dict[str, int]:
    return dict(
        client.latest_offsets(
            "s", query_id, start, max_records=0, cap=None, fail_on_data_loss=True
        ).end
    )


@pytest.fixture
def clients() -> Iterator[list[PlannerClient]]:
    made: list[PlannerClient] = []
    yield made
    for client in made:
        client.close()


def _client(clients: list[PlannerClient], address: str, **kw: float) -> PlannerClient:
    client = PlannerClient(address, **kw)
    clients.append(client)
    return client


async def test_micro_batches_go_over_one_stream_kept_open(
    three: list[tuple[Replica, str]], clients: list[PlannerClient]
) -> None:
    (replica, address), *_ = three
    client = _client(clients, address)
    at = {"a/t/0": 5, "a/t/1": 7}
    for _ in range(5):
        at = await asyncio.to_thread(_latest, client, "q", at)
    assert at == {"a/t/0": 10, "a/t/1": 12}
    assert (replica.streams, replica.requests, replica.unary_calls) == (1, 5, 0)


async def test_a_refused_request_fails_as_the_unary_call_and_the_next_opens_a_new_stream(
    three: list[tuple[Replica, str]], clients: list[PlannerClient]
) -> None:
    (replica, address), *_ = three
    client = _client(clients, address)
    with pytest.raises(ValidationError, match="'bad' is not a query id"):
        await asyncio.to_thread(_latest, client, "bad", {"a/t/0": 1})
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 1}) == {"a/t/0": 2}
    assert (replica.streams, replica.requests, replica.unary_calls) == (2, 2, 0)


async def test_a_standby_on_the_stream_sends_the_client_to_the_leader(
    three: list[tuple[Replica, str]], clients: list[PlannerClient]
) -> None:
    (standby, standby_address), (leader, leader_address), _ = three
    standby.leader = leader_address
    client = _client(clients, standby_address)
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 1}) == {"a/t/0": 2}
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 2}) == {"a/t/0": 3}
    assert (standby.requests, leader.streams, leader.requests) == (1, 1, 2)


async def test_no_answer_in_time_moves_on_as_a_unary_timeout_does(
    three: list[tuple[Replica, str]], clients: list[PlannerClient]
) -> None:
    (frozen, frozen_address), (other, other_address), _ = three
    frozen.hold = asyncio.Event()  # never set: a frozen replica
    client = _client(clients, f"{frozen_address},{other_address}", call_timeout_s=0.5)
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 1}) == {"a/t/0": 2}
    assert (frozen.requests, other.requests) == (1, 1)
    # With no other replica, the deadline ends the call.
    alone = _client(clients, frozen_address, call_timeout_s=0.3, timeout_s=1.0)
    with pytest.raises(UnavailableError, match=r"no answer within 0\.3 s"):
        await asyncio.to_thread(_latest, alone, "q", {"a/t/0": 1})


async def test_an_older_coordinator_is_called_once_per_request(
    three: list[tuple[Replica, str]], clients: list[PlannerClient]
) -> None:
    *_, (older, address) = three
    client = _client(clients, address)
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 1}) == {"a/t/0": 2}
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 2}) == {"a/t/0": 3}
    assert (older.streams, older.unary_calls) == (0, 2)


async def test_while_one_thread_waits_on_the_stream_another_calls_once(
    three: list[tuple[Replica, str]],
) -> None:
    (replica, address), *_ = three
    replica.hold = asyncio.Event()
    coordinators = Coordinators(ConnectConfig.parse(address))

    def ask(query_id: str) -> planner_pb2.LatestOffsetsResponse:
        request = planner_pb2.LatestOffsetsRequest(stream="s", query_id=query_id)
        return coordinators.exchange(
            "latest offsets",
            LATEST_OFFSETS_STREAM,
            request,
            planner_pb2.LatestOffsetsResponse,
            lambda channel: planner_pb2_grpc.PlannerStub(channel).LatestOffsets,
            timeout_s=10,
            deadline_s=10,
        )

    try:
        first = threading.Thread(target=ask, args=("first",))
        first.start()
        await eventually_async(lambda: replica.requests == 1)
        second = asyncio.create_task(asyncio.to_thread(ask, "second"))
        await eventually_async(lambda: replica.requests == 2)
        replica.hold.set()
        await second
        await asyncio.to_thread(first.join, 10)
        assert (replica.streams, replica.unary_calls) == (1, 1)
    finally:
        replica.hold.set()
        coordinators.close()


async def test_a_request_that_does_not_parse_ends_the_stream_invalid_argument(
    three: list[tuple[Replica, str]],
) -> None:
    (replica, address), *_ = three
    channel = grpc.insecure_channel(address)
    try:
        call = channel.stream_stream(LATEST_OFFSETS_STREAM)(iter([b"\xff\xff\xff"]), timeout=5)
        with pytest.raises(grpc.RpcError) as info:
            await asyncio.to_thread(list, call)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not parse" in (info.value.details() or "")
        assert replica.requests == 0
    finally:
        channel.close()


async def test_a_stream_that_broke_while_idle_does_not_fail_the_next_request(
    clients: list[PlannerClient],
) -> None:
    """A replica restarted between two micro-batches ended the kept stream
    (as a rolling restart does): the next request opens a new one."""
    first = Replica()
    server, address = await _serve(first)
    client = _client(clients, address)
    assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 1}) == {"a/t/0": 2}
    await server.stop(0.2)  # as the coordinator stops: in-flight calls get a grace
    again = Replica()
    server, _ = await _serve(again, address)
    try:
        assert await asyncio.to_thread(_latest, client, "q", {"a/t/0": 2}) == {"a/t/0": 3}
        assert (first.streams, again.streams, again.requests) == (1, 1, 1)
    finally:
        await server.stop(0)


class ClosedAfterEachAnswer(Replica):
    """Ends its stream after each answer with a status the client does not
    retry (as a proxy closing idle streams might)."""

    async def LatestOffsetsStream(
        self, request_iterator: AsyncIterator[planner_pb2.LatestOffsetsRequest], context: Ctx
    ) -> AsyncIterator[planner_pb2.LatestOffsetsResponse]:
        self.streams += 1
        async for request in request_iterator:
            yield await self._answer(request, context)
            await context.abort(grpc.StatusCode.CANCELLED, "closed while idle")


async def test_a_stream_ended_while_idle_is_replaced_before_the_request_goes(
    clients: list[PlannerClient],
) -> None:
    replica = ClosedAfterEachAnswer()
    server, address = await _serve(replica)
    try:
        client = _client(clients, address)
        at = {"a/t/0": 1}
        for _ in range(3):
            at = await asyncio.to_thread(_latest, client, "q", at)
            coordinators = client._coordinators
            assert coordinators is not None
            await eventually_async(lambda: all(k.ended for k in coordinators._exchanges.values()))  # noqa: B023
        assert at == {"a/t/0": 4}
        assert (replica.streams, replica.requests, replica.unary_calls) == (3, 3, 0)
    finally:
        await server.stop(0)
