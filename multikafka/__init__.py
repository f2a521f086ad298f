"""multikafka: read one logical Kafka stream spread over several Kafka
clusters from Spark, and fail over or migrate clusters without restarting
the job.

This is the top of the layers (see docs/architecture.md): the public names
users import, the ``multikafka`` command line (:mod:`multikafka.cli`), the
local development stack (:mod:`multikafka.devstack`) and the demo
(:mod:`multikafka.demo`). Everything below it lives in ``multikafka_core``
(model, contracts), ``coordinator`` and ``reader_agent`` (services) and
``spark_bridge`` (the Spark source).
"""

from multikafka.reader import Reader
from multikafka_core.exceptions import (
    AuthenticationError,
    ConflictError,
    DataLossError,
    MultikafkaError,
    NotFoundError,
    PreconditionError,
    UnavailableError,
    ValidationError,
)
from multikafka_core.model import (
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
from multikafka_core.validation import parse_stream, parse_stream_json

__version__ = "0.2.0"

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
    "Reader",
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
