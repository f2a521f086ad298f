"""The audit trail: one JSON line per call that changes something, per
refused call, and per policy reload, on the logger ``multikafka.audit``.

A line says who (the principal), when, what (the gRPC method and a summary
of the request: names, states, strategies; never a document's properties,
a token or a secret), on which stream, and the outcome. Route the logger
to where audit records go (it logs at INFO; ``propagate`` is left on).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["AUDIT_LOGGER", "audit"]

AUDIT_LOGGER = "multikafka.audit"
_logger = logging.getLogger(AUDIT_LOGGER)


def audit(
    event: str,
    *,
    principal: str,
    method: str = "",
    stream: str = "",
    request: dict[str, Any] | None = None,
    outcome: str = "ok",
    level: int = logging.INFO,
) -> dict[str, Any]:
    """Log one audit line; returns what it logged (for tests and callers)."""
    now = time.time()
    record: dict[str, Any] = {
        "audit": event,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        + f".{int(now % 1 * 1000):03d}Z",
        "principal": principal,
        "method": method,
        "stream": stream,
        "request": request or {},
        "outcome": outcome,
    }
    _logger.log(level, json.dumps(record, sort_keys=False), extra={"audit": record})
    return record
