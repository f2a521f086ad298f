"""Who may call what.

* Admin service: the admin token (``--admin-token-file``).
* Planner and Reader services: the reader token (``--reader-token-file``),
  or a client certificate when the coordinator requires them (mutual TLS):
  these services hand out cluster connection settings, secrets included.
* Health checking and reflection: anyone.

A service without a configured credential is open. No credential gives
``UNAUTHENTICATED``; a wrong one (such as the reader token on the Admin
service) ``PERMISSION_DENIED``. Tokens are compared in constant time and
never appear in a log line or an error.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from multikafka.coordinator.api.rpc import handler_like

ADMIN_PREFIX = "/multikafka.v1.Admin/"
READER_PREFIXES = ("/multikafka.v1.Planner/", "/multikafka.v1.Reader/")


class Role(enum.Enum):
    ADMIN = "admin"
    READER = "reader"
    OPEN = "open"


def role_of(method: str) -> Role:
    """The credential a gRPC method (``/package.Service/Method``) needs."""
    if method.startswith(ADMIN_PREFIX):
        return Role.ADMIN
    if method.startswith(READER_PREFIXES):
        return Role.READER
    return Role.OPEN


_HOW = {
    Role.ADMIN: "the admin token (multikafka admin --token-file PATH, or MULTIKAFKA_ADMIN_TOKEN)",
    Role.READER: (
        "the reader token (Spark option coordinatorTokenFile, Reader(token_file=...), or"
        " MULTIKAFKA_READER_TOKEN) or a client certificate"
    ),
}


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks ``authorization: Bearer <token>`` against the token of the
    method's service (see the module docstring)."""

    def __init__(self, admin_token: str, reader_token: str, *, mtls: bool) -> None:
        self._tokens = {Role.ADMIN: admin_token.encode(), Role.READER: reader_token.encode()}
        #: With mutual TLS every connection carries a verified client
        #: certificate: that authenticates readers.
        self._mtls = mtls

    async def intercept_service(  # type: ignore[override]  # types-grpcio: generic method
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        role = role_of(handler_call_details.method)
        if role is Role.OPEN or (role is Role.READER and self._mtls):
            return await continuation(handler_call_details)
        expected = self._tokens[role]
        if not expected:
            return await continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = str(metadata.get("authorization", ""))
        handler = await continuation(handler_call_details)
        if not given.startswith("Bearer ") or not given[7:]:
            return _deny(
                handler,
                grpc.StatusCode.UNAUTHENTICATED,
                f"{role.value} calls need 'authorization: Bearer <token>': {_HOW[role]}",
            )
        if not hmac.compare_digest(given[7:].encode(), expected):
            return _deny(
                handler,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the token given is not the {role.value} token of this coordinator",
            )
        return handler


def _deny(
    handler: grpc.RpcMethodHandler[Any, Any] | None, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same kind as ``handler`` that refuses the call."""

    async def abort(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")

    async def abort_stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    return handler_like(handler, abort, abort_stream)
