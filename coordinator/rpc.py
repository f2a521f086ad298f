"""Turning errors into gRPC statuses at the edge of every service method.

A :class:`MultikafkaError` becomes its status with its message, cut to a
bounded length (a message never echoes unbounded input, and gRPC carries it
in trailing metadata whose size is limited). A standby's
:class:`NotLeaderError` also names the leader in the trailing metadata, for
clients to move there. Anything else is logged and becomes ``INTERNAL``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from multikafka_core.exceptions import MultikafkaError, NotLeaderError
from multikafka_core.grpc_codes import LEADER_KEY, clip, to_grpc_code

logger = logging.getLogger(__name__)

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Ctx = grpc.aio.ServicerContext[Any, Any]


async def _abort(context: Ctx, error: BaseException, method: str) -> NoReturn:
    if isinstance(error, MultikafkaError):
        metadata = ((LEADER_KEY, error.leader),) if isinstance(error, NotLeaderError) else ()
        await context.abort(to_grpc_code(error), clip(str(error)), trailing_metadata=metadata)
    logger.error("unexpected error in %s", method, exc_info=error)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal error in {method}; see the coordinator log"
    )
    raise AssertionError("unreachable: context.abort raises")


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
