"""gRPC status codes <-> multikafka errors, in one place, both ways."""

from __future__ import annotations

import grpc

from multikafka.core import exceptions as exc

_BY_CODE: dict[grpc.StatusCode, type[exc.MultikafkaError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: exc.ValidationError,
    grpc.StatusCode.NOT_FOUND: exc.NotFoundError,
    grpc.StatusCode.ABORTED: exc.ConflictError,
    grpc.StatusCode.ALREADY_EXISTS: exc.ConflictError,
    grpc.StatusCode.FAILED_PRECONDITION: exc.PreconditionError,
    grpc.StatusCode.UNAVAILABLE: exc.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: exc.UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: exc.AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: exc.PermissionDeniedError,
    grpc.StatusCode.DATA_LOSS: exc.DataLossError,
}


#: Trailing metadata of a standby's UNAVAILABLE answer: the leader's address.
LEADER_KEY = "multikafka-leader"

#: Longest error message a service returns (gRPC carries the message in
#: trailing metadata, whose size is limited; input is never echoed whole).
MAX_DETAILS = 1000


def clip(text: str, limit: int = MAX_DETAILS) -> str:
    """``text`` cut to ``limit`` bytes of UTF-8, saying how much was left out.

    Bytes, not characters: gRPC sends the message percent-encoded in trailing
    metadata, where 1,000 emoji (4,000 bytes, 12,000 encoded) would pass the
    receiver's 8 KiB soft limit. Lone surrogates are escaped (``\\udc80``)."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode("utf-8")
    head = data[:limit].decode("utf-8", "ignore")
    return f"{head}... ({len(data) - len(head.encode())} more bytes)"


def leader_of(error: grpc.RpcError) -> str:
    """The leader's address a standby named in its answer ("" if none)."""
    if not isinstance(error, grpc.Call):
        return ""
    for key, value in error.trailing_metadata() or ():
        if key == LEADER_KEY:
            return str(value)
    return ""


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
    leader = leader_of(error)
    if code == grpc.StatusCode.UNAVAILABLE and leader:
        return exc.NotLeaderError(leader)
    return cls(f"{prefix}{details}")
