"""gRPC status codes <-> multikafka errors, in one place, both ways."""

from __future__ import annotations

import grpc

from multikafka_core import exceptions as exc

_BY_CODE: dict[grpc.StatusCode, type[exc.MultikafkaError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: exc.ValidationError,
    grpc.StatusCode.NOT_FOUND: exc.NotFoundError,
    grpc.StatusCode.ABORTED: exc.ConflictError,
    grpc.StatusCode.ALREADY_EXISTS: exc.ConflictError,
    grpc.StatusCode.FAILED_PRECONDITION: exc.PreconditionError,
    grpc.StatusCode.UNAVAILABLE: exc.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: exc.UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: exc.AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: exc.AuthenticationError,
    grpc.StatusCode.DATA_LOSS: exc.DataLossError,
}


def to_grpc_code(error: BaseException) -> grpc.StatusCode:
    """The status a service answers with for ``error``."""
    if isinstance(error, exc.MultikafkaError):
        return grpc.StatusCode[error.grpc_code_name]
    return grpc.StatusCode.INTERNAL


def from_rpc_error(error: grpc.RpcError, what: str = "") -> exc.MultikafkaError:
    """A multikafka error for a failed call; chain it with ``from error``."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    prefix = f"{what}: " if what else ""
    cls = _BY_CODE.get(code, exc.MultikafkaError)
    if cls is exc.ValidationError:
        return exc.ValidationError("", f"{prefix}{details}")
    return cls(f"{prefix}{details}")
