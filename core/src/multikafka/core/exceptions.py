"""Errors raised by multikafka. Every one derives from :class:`MultikafkaError`.

Each error class names the gRPC status it maps to (``grpc_code``); the mapping
both ways lives in :mod:`multikafka.core._grpc_codes`.
"""

from __future__ import annotations


def shown(value: object, limit: int = 80) -> str:
    """How an error quotes a value it was given: its ``repr``, cut short
    (an error never echoes unbounded input)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _printable(text: str) -> str:
    """``text`` with lone surrogates escaped (``\\udc80``), so it encodes as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class MultikafkaError(Exception):
    """Root of every error multikafka raises on purpose."""

    grpc_code_name = "INTERNAL"


class ValidationError(MultikafkaError):
    """A document, option or request is invalid. The message says what to fix."""

    grpc_code_name = "INVALID_ARGUMENT"

    def __init__(self, field: str, problem: str) -> None:
        # A field's path holds keys of the input (document keys): cut it short,
        # and escape what is not text (a lone surrogate cannot be sent).
        field = _printable(field)
        self.field = field if len(field) <= 200 else f"{field[:200]}..."
        self.problem = _printable(problem)
        super().__init__(f"{self.field}: {self.problem}" if field else self.problem)


class NotFoundError(MultikafkaError):
    """A stream, cluster, query or reader does not exist."""

    grpc_code_name = "NOT_FOUND"


class ConflictError(MultikafkaError):
    """A write lost an optimistic concurrency check (the stored version moved)."""

    grpc_code_name = "ABORTED"


class PreconditionError(MultikafkaError):
    """The request is valid but the system is not in a state that allows it."""

    grpc_code_name = "FAILED_PRECONDITION"


class UnavailableError(MultikafkaError):
    """A dependency (etcd, a Kafka cluster, the coordinator) cannot be reached."""

    grpc_code_name = "UNAVAILABLE"


class NotLeaderError(UnavailableError):
    """This coordinator replica is a standby; ``leader`` is where the leader
    is ("" while there is none). Clients move there by themselves."""

    def __init__(self, leader: str) -> None:
        self.leader = leader
        where = f"the leader is at {leader}" if leader else "no leader is elected yet"
        super().__init__(f"this coordinator is a standby; {where}")


class LeaderStartingError(NotLeaderError):
    """This replica was elected and is still loading its term's state (read
    from etcd, its clusters set up): it answers as the leader once ready.
    Clients retry it (``leader`` is its own address)."""

    def __init__(self, leader: str) -> None:
        UnavailableError.__init__(
            self, "this coordinator was just elected and is loading its state; retry"
        )
        self.leader = leader


class AuthenticationError(MultikafkaError):
    """The caller did not prove who it is (no credential)."""

    grpc_code_name = "UNAUTHENTICATED"


class PermissionDeniedError(AuthenticationError):
    """The caller's credential is wrong, or not one for this service."""

    grpc_code_name = "PERMISSION_DENIED"


class DataLossError(MultikafkaError):
    """Records the query should have read are gone (retention, topic recreated).

    Raised only when ``failOnDataLoss`` is true; otherwise the loss is counted.
    """

    grpc_code_name = "DATA_LOSS"


class MalformedRecordError(MultikafkaError):
    """A record's key or value did not decode and the query's ``mode`` is
    ``FAILFAST``. The message names stream, split, offset and the problem,
    never the payload (payloads may hold secrets)."""

    grpc_code_name = "INVALID_ARGUMENT"
