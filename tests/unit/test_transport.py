"""Clients follow the leader: a standby's refusal moves the client at once
(gRPC's own retry policy does not ask the standby again), and only a replica
that is away or a standby moves it. Loopback gRPC servers, no etcd."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from multikafka.coordinator.api.rpc import unary
from multikafka.core.exceptions import NotLeaderError
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.v1 import admin_pb2, admin_pb2_grpc

INTERNALS = ("multikafka.coordinator.api.rpc",)


Ctx = grpc.aio.ServicerContext[Any, Any]


class Replica(admin_pb2_grpc.AdminServicer):
    """GetStream answers as the leader, or refuses as a standby naming it."""

    def __init__(self) -> None:
        self.calls = 0
        self.leader = ""  # "" : this one leads

    @unary
    async def GetStream(self, request: admin_pb2.GetStreamRequest, context: Ctx) -> Any:
        self.calls += 1
        if self.leader:
            raise NotLeaderError(self.leader)
        return admin_pb2.StreamInfo(name=request.name)


async def _serve(replica: Replica) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    admin_pb2_grpc.add_AdminServicer_to_server(replica, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def two() -> AsyncIterator[tuple[Replica, str, Replica, str]]:
    standby, leader = Replica(), Replica()
    s1, standby_address = await _serve(standby)
    s2, leader_address = await _serve(leader)
    standby.leader = leader_address
    yield standby, standby_address, leader, leader_address
    await s1.stop(0)
    await s2.stop(0)


def _get(coordinators: Coordinators) -> str:
    def call(channel: grpc.Channel, metadata: Any) -> str:
        stub = admin_pb2_grpc.AdminStub(channel)
        return str(stub.GetStream(admin_pb2.GetStreamRequest(name="s"), metadata=metadata).name)

    return coordinators.call("get", call, deadline_s=10)


async def test_a_standby_is_asked_once_then_the_client_moves_to_the_leader(
    two: tuple[Replica, str, Replica, str],
) -> None:
    standby, standby_address, leader, leader_address = two
    coordinators = Coordinators(ConnectConfig.parse(standby_address))
    try:
        assert await asyncio.to_thread(_get, coordinators) == "s"
        assert coordinators.address == leader_address
    finally:
        coordinators.close()
    # Without the server's pushback gRPC's retry policy asked the standby 3 times.
    assert (standby.calls, leader.calls) == (1, 1)


class _Failed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A failed call as the client sees it."""

    def __init__(self, code: grpc.StatusCode, leader: str = "") -> None:
        self._code = code
        self._trailing = (("multikafka-leader", leader),) if leader else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return ""

    def trailing_metadata(self) -> Any:
        return self._trailing

    def initial_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


def test_a_refusal_does_not_move_the_client() -> None:
    coordinators = Coordinators(ConnectConfig.parse("a:1,b:2"))
    for code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT):
        coordinators.moved(_Failed(code), "a:1")
    assert coordinators.address == "a:1"


def test_several_failures_on_one_replica_move_once() -> None:
    """Three threads fail on dead replica a: the client goes to b, not back to a."""
    coordinators = Coordinators(ConnectConfig.parse("a:1,b:2"))
    for _ in range(3):
        coordinators.moved(_Failed(grpc.StatusCode.UNAVAILABLE), "a:1")
    assert coordinators.address == "b:2"


def test_a_standby_naming_the_leader_sends_the_client_there() -> None:
    coordinators = Coordinators(ConnectConfig.parse("a:1,b:2"))
    coordinators.moved(_Failed(grpc.StatusCode.UNAVAILABLE, leader="c:3"), "a:1")
    assert coordinators.address == "c:3"


def test_a_leader_still_starting_keeps_the_client() -> None:
    """A replica just elected names itself (its duties are loading): the
    client retries it, not another replica."""
    coordinators = Coordinators(ConnectConfig.parse("a:1,b:2"))
    assert not coordinators.moved(_Failed(grpc.StatusCode.UNAVAILABLE, leader="a:1"), "a:1")
    assert coordinators.address == "a:1"
