"""Turning errors into gRPC statuses at the edge of every service method."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from multikafka_core.exceptions import MultikafkaError
from multikafka_core.grpc_codes import to_grpc_code

logger = logging.getLogger(__name__)

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def unary(
    fn: Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """Map a unary method's errors: a :class:`MultikafkaError` becomes its status
    with its message; anything else is logged and becomes ``INTERNAL``."""

    @functools.wraps(fn)
    async def wrapper(self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await fn(self, request, context)
        except MultikafkaError as exc:
            await context.abort(to_grpc_code(exc), str(exc))
        except Exception:
            logger.exception("unexpected error in %s", fn.__qualname__)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error in {fn.__name__}; see the coordinator log",
            )
        raise AssertionError("unreachable: context.abort raises")

    return wrapper


def streaming(
    fn: Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
    """:func:`unary` for server-streaming methods."""

    @functools.wraps(fn)
    async def wrapper(
        self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except MultikafkaError as exc:
            await context.abort(to_grpc_code(exc), str(exc))
        except Exception:
            logger.exception("unexpected error in %s", fn.__qualname__)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error in {fn.__name__}; see the coordinator log",
            )

    return wrapper
