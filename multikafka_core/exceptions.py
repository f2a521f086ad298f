"""Errors raised by multikafka. Every one derives from :class:`MultikafkaError`.

Each error class names the gRPC status it maps to (``grpc_code``); the mapping
both ways lives in :mod:`multikafka_core.grpc_codes`.
"""

from __future__ import annotations


class MultikafkaError(Exception):
    """Root of every error multikafka raises on purpose."""

    grpc_code_name = "INTERNAL"


class ValidationError(MultikafkaError):
    """A document, option or request is invalid. The message says what to fix."""

    grpc_code_name = "INVALID_ARGUMENT"

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


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


class AuthenticationError(MultikafkaError):
    """The caller did not prove who it is (missing or wrong admin token)."""

    grpc_code_name = "UNAUTHENTICATED"


class DataLossError(MultikafkaError):
    """Records the query should have read are gone (retention, topic recreated).

    Raised only when ``failOnDataLoss`` is true; otherwise the loss is counted.
    """

    grpc_code_name = "DATA_LOSS"
