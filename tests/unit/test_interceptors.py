"""What the coordinator's interceptors cost a call: the request-parsing one
wraps each method's handler once, and the auth one is not installed when
there is no token to check."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from multikafka.coordinator import CoordinatorConfig
from multikafka.coordinator.access import AccessControl
from multikafka.coordinator.api.auth import AuthInterceptor
from multikafka.coordinator.api.rpc import ParseInterceptor
from multikafka.coordinator.runtime import services
from multikafka.v1 import planner_pb2
from tests.unit.test_services import Aborted, Context

INTERNALS = (
    "multikafka.coordinator.access",
    "multikafka.coordinator.api.auth",
    "multikafka.coordinator.api.rpc",
    "multikafka.coordinator.runtime.services",
)


METHOD = "/multikafka.v1.Planner/LatestOffsets"


class Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


async def test_a_methods_handler_is_wrapped_once_and_refuses_what_does_not_parse() -> None:
    async def behavior(request: Any, context: Any) -> str:
        return f"served {request.stream}"

    handler = grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=planner_pb2.LatestOffsetsRequest.FromString
    )

    async def continuation(details: Any) -> Any:
        return handler

    interceptor = ParseInterceptor("/multikafka.v1.")
    first = await interceptor.intercept_service(continuation, Details(METHOD))  # type: ignore[arg-type]
    again = await interceptor.intercept_service(continuation, Details(METHOD))  # type: ignore[arg-type]
    assert first is again  # no new closures per call
    request = first.request_deserializer(
        planner_pb2.LatestOffsetsRequest(stream="s").SerializeToString()
    )
    assert await first.unary_unary(request, Context()) == "served s"
    context = Context()
    with pytest.raises(Aborted):
        await first.unary_unary(first.request_deserializer(b"\xff\xff\xff"), context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("config", "checks"),
    [
        (CoordinatorConfig(), False),
        (CoordinatorConfig(reader_token="r"), True),
        (CoordinatorConfig(admin_token="a"), True),
        (CoordinatorConfig(access_policy="/nowhere/policy.yaml"), True),
    ],
    ids=["no token", "reader token", "admin token", "access policy"],
)
async def test_auth_is_checked_only_when_a_token_is_set(
    config: CoordinatorConfig, checks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[Any]] = []

    def server(*, interceptors: list[Any], options: Any) -> Any:
        seen.append(interceptors)
        raise RuntimeError("enough")

    monkeypatch.setattr(services.grpc.aio, "server", server)
    with pytest.raises(RuntimeError, match="enough"):
        await services.start_grpc_server(
            config,
            None,  # type: ignore[arg-type]
            leading=None,  # type: ignore[arg-type]
            reports=None,  # type: ignore[arg-type]
            replica=None,  # type: ignore[arg-type]
            store=None,  # type: ignore[arg-type]
            access=AccessControl(
                config.access_policy,
                admin_token=config.admin_token,
                reader_token=config.reader_token,
            ),
        )
    (interceptors,) = seen
    assert any(isinstance(i, AuthInterceptor) for i in interceptors) is checks
    assert any(isinstance(i, ParseInterceptor) for i in interceptors)
