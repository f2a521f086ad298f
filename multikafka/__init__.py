"""multikafka: read one logical Kafka stream spread over several Kafka
clusters from Spark, and fail over or migrate clusters without restarting
the job.

This package holds what the coordinator, the reader agent and the Spark
bridge share: the domain model, validation, offsets, errors, the provider
interfaces and the generated gRPC stubs (``multikafka.v1``).
"""

from multikafka.exceptions import (
    AuthenticationError,
    ConflictError,
    DataLossError,
    MultikafkaError,
    NotFoundError,
    PreconditionError,
    UnavailableError,
    ValidationError,
)
from multikafka.model import (
    AutoFailover,
    ClusterSpec,
    ClusterState,
    Connection,
    FailoverStrategy,
    SplitId,
    StartingPosition,
    StartKind,
    StreamSpec,
)
from multikafka.validation import parse_stream, parse_stream_json

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "AutoFailover",
    "ClusterSpec",
    "ClusterState",
    "ConflictError",
    "Connection",
    "DataLossError",
    "FailoverStrategy",
    "MultikafkaError",
    "NotFoundError",
    "PreconditionError",
    "SplitId",
    "StartKind",
    "StartingPosition",
    "StreamSpec",
    "UnavailableError",
    "ValidationError",
    "__version__",
    "parse_stream",
    "parse_stream_json",
]
