"""Turning errors into gRPC statuses at the edge of every service method.

A :class:`MultikafkaError` becomes its status with its message, cut to a
bounded length (a message never echoes unbounded input, and gRPC carries it
in trailing metadata whose size is limited). A standby's
:class:`NotLeaderError` also names the leader in the trailing metadata, for
clients to move there. Anything else is logged and becomes ``INTERNAL``.

Request bytes that do not parse (not protobuf, or a string field that is
not UTF-8) fail before a service method runs; :class:`ParseInterceptor`
answers them ``INVALID_ARGUMENT`` rather than grpcio's ``UNKNOWN``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from multikafka.core._grpc_codes import LEADER_KEY, clip, to_grpc_code
from multikafka.core.exceptions import MultikafkaError, NotLeaderError

logger = logging.getLogger(__name__)

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Ctx = grpc.aio.ServicerContext[Any, Any]
#: Server pushback of gRPC's retry policy; a negative value: do not retry.
_NO_RETRY_KEY = "grpc-retry-pushback-ms"


async def _abort(context: Ctx, error: BaseException, method: str) -> NoReturn:
    if isinstance(error, MultikafkaError):
        # A standby's refusal names the leader, and tells gRPC not to retry
        # it here (a retry would meet the same standby): the client moves.
        metadata = (
            ((LEADER_KEY, error.leader), (_NO_RETRY_KEY, "-1"))
            if isinstance(error, NotLeaderError)
            else ()
        )
        await context.abort(to_grpc_code(error), clip(str(error)), trailing_metadata=metadata)
    logger.error("unexpected error in %s", method, exc_info=error)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal error in {method}; see the coordinator log"
    )
    raise AssertionError("unreachable: context.abort raises")


def handler_like(
    handler: grpc.RpcMethodHandler[Any, Any] | None,
    unary: Callable[[Any, Ctx], Awaitable[Any]],
    stream: Callable[[Any, Ctx], AsyncIterator[Any]],
    *,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of ``handler``'s kind running ``stream`` (server-streaming
    and bidirectional: then it gets the request iterator) or ``unary``
    (otherwise; for a client-streaming method it gets the request iterator),
    with its serializers; ``request_deserializer`` replaces its
    deserializer."""
    deserializer = request_deserializer or (handler.request_deserializer if handler else None)
    serializer = handler.response_serializer if handler else None
    if handler is not None and handler.response_streaming and handler.request_streaming:
        return grpc.stream_stream_rpc_method_handler(
            stream, request_deserializer=deserializer, response_serializer=serializer
        )
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=deserializer, response_serializer=serializer
        )
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=deserializer, response_serializer=serializer
        )
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=deserializer, response_serializer=serializer
    )


class _Unparsed:
    """What a request that did not parse is handed on as."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def safe_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserialize`` answering bytes that do not parse with a marker
    instead of raising (the method refuses the marker)."""
    if deserialize is None:
        return None

    def safe(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:
            return _Unparsed(exc)

    return safe


async def _refuse_unparsed(request: _Unparsed, context: Ctx, method: str) -> NoReturn:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        clip(f"the request to {method} does not parse: {request.error}"),
    )
    raise AssertionError("unreachable: context.abort raises")


class ParseInterceptor(grpc.aio.ServerInterceptor):
    """Answers requests to ``prefix`` methods that do not parse with
    ``INVALID_ARGUMENT`` (unary, server-streaming and bidirectional methods:
    for these, the first request that does not parse ends the call). The
    wrapped handler of a method is made once, on its first call."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        #: method -> (its handler, the wrapped handler)
        self._wrapped: dict[str, tuple[Any, grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(  # type: ignore[override]  # types-grpcio: generic method
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        if handler.request_streaming and not handler.response_streaming:
            return handler
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = _refusing_unparsed(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _refusing_unparsed(
    handler: grpc.RpcMethodHandler[Any, Any], method: str
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` refusing requests that did not parse."""
    # Behaviors are coroutines here (an aio server).
    behavior: Any = handler.unary_unary
    behavior_stream: Any = handler.stream_stream or handler.unary_stream

    async def unary(request: Any, context: Ctx) -> Any:
        if isinstance(request, _Unparsed):
            await _refuse_unparsed(request, context, method)
        return await behavior(request, context)

    async def parsed(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Unparsed):
                await _refuse_unparsed(request, context, method)
            yield request

    async def stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
        if handler.request_streaming:
            request = parsed(request, context)
        elif isinstance(request, _Unparsed):
            await _refuse_unparsed(request, context, method)
        async for item in behavior_stream(request, context):
            yield item

    return handler_like(
        handler,
        unary,
        stream,
        request_deserializer=safe_deserializer(handler.request_deserializer),
    )


def unary(
    fn: Callable[[S, Req, Ctx], Awaitable[Resp]],
) -> Callable[[S, Req, Ctx], Awaitable[Resp]]:
    """Map a unary method's errors to statuses (see the module docstring)."""

    @functools.wraps(fn)
    async def wrapper(self: S, request: Req, context: Ctx) -> Resp:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, fn.__name__)

    return wrapper


def streaming(
    fn: Callable[[S, Req, Ctx], AsyncIterator[Resp]],
) -> Callable[[S, Req, Ctx], AsyncIterator[Resp]]:
    """:func:`unary` for server-streaming methods."""

    @functools.wraps(fn)
    async def wrapper(self: S, request: Req, context: Ctx) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, fn.__name__)

    return wrapper
