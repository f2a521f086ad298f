"""multikafka: read one logical Kafka stream spread over several Kafka
clusters from Spark, and fail over or migrate clusters without restarting
the job.

``multikafka`` is one package whose parts come in distributions of their own
(docs/architecture.md, "Distributions"): ``multikafka.core`` and
``multikafka.v1`` (multikafka-core, which ships this file),
``multikafka.coordinator`` (multikafka-coordinator), ``multikafka.reader_agent``
and ``multikafka.reader`` (multikafka-reader), ``multikafka.spark``
(multikafka-spark), and the CLI, dev stack and demo (multikafka). Installed
from wheels they share one folder; installed for development (``make
install``) each lives in its distribution's ``src/``, and the line below joins
those folders into this package's path (pkgutil's way: importing any part
finds the others).

The public names: the stream model and its errors from the core, and
:class:`Reader` (the standalone reader, multikafka-reader), imported when
first used so that ``import multikafka.coordinator`` loads no read path.
"""

from __future__ import annotations

import pkgutil
from typing import TYPE_CHECKING, Any

# In place: grimp (make layers) finds the folders through the spec, which
# shares this list.
__path__[:] = pkgutil.extend_path(__path__, __name__)

from multikafka.core.exceptions import (  # noqa: E402
    AuthenticationError,
    ConflictError,
    DataLossError,
    MultikafkaError,
    NotFoundError,
    PreconditionError,
    UnavailableError,
    ValidationError,
)
from multikafka.core.model import (  # noqa: E402
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
from multikafka.core.validation import parse_stream, parse_stream_json  # noqa: E402

if TYPE_CHECKING:
    from multikafka.reader import Reader

#: Every distribution has this version (tests/unit/test_exports.py).
__version__ = "0.3.0"

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


def __getattr__(name: str) -> Any:
    if name == "Reader":
        try:
            from multikafka.reader import Reader
        except ModuleNotFoundError as exc:
            if exc.name not in ("multikafka.reader", "pyarrow", "confluent_kafka"):
                raise
            raise ImportError(
                "multikafka.Reader is the standalone reader of the multikafka-reader "
                f"distribution, which is not installed here ({exc}): "
                "pip install multikafka-reader"
            ) from exc
        return Reader
    raise AttributeError(f"module 'multikafka' has no attribute {name!r}")
