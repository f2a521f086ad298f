"""What the coordinator keeps about a stream besides its document: the drain
end offsets and the failover records (``<prefix>/status/<stream>`` in etcd).

The document is the operator's intent; the status is what the coordinator
decided while carrying it out. Both are needed to plan a query's next batch.

Drain offsets are kept in columns (a drained cluster may hold 10,000 splits,
and every batch plans against them) and stored in the compact document form
of :mod:`multikafka.core._offsets`; the flat form of earlier versions is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multikafka.core import _offsets as ov
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import DEFAULT_MARGIN_MS, FailoverStrategy, StreamSpec

#: Failover records kept per stream (a query restarted from an old checkpoint
#: still finds how to translate its offsets).
MAX_FAILOVERS = 20


@dataclass(frozen=True)
class FailoverRecord:
    """The decision to replace ``from_cluster`` by ``to_cluster``."""

    from_cluster: str
    to_cluster: str
    strategy: FailoverStrategy
    margin_ms: int
    at_ms: int
    reason: str = ""
    automatic: bool = False
    #: How translation stood when it was decided (``mm2``: which partitions
    #: have offset syncs, and that the others fall back to ``timestamp``).
    note: str = ""

    def to_document(self) -> dict[str, Any]:
        return {
            "from": self.from_cluster,
            "to": self.to_cluster,
            "strategy": self.strategy.value,
            "margin_ms": self.margin_ms,
            "at_ms": self.at_ms,
            "reason": self.reason,
            "automatic": self.automatic,
            "note": self.note,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> FailoverRecord:
        return cls(
            str(doc["from"]),
            str(doc["to"]),
            FailoverStrategy(doc.get("strategy", "timestamp")),
            int(doc.get("margin_ms", DEFAULT_MARGIN_MS)),
            int(doc.get("at_ms", 0)),
            str(doc.get("reason", "")),
            bool(doc.get("automatic", False)),
            str(doc.get("note", "")),
        )


@dataclass(frozen=True)
class StreamStatus:
    #: cluster -> {split id: end offset captured when it began DRAINING}
    drains: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Oldest first.
    failovers: tuple[FailoverRecord, ...] = ()

    def to_json(self) -> bytes:
        doc = {
            "drains": {c: ov.to_document(o) for c, o in sorted(self.drains.items())},
            "failovers": [f.to_document() for f in self.failovers[-MAX_FAILOVERS:]],
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StreamStatus:
        """Parse a stored status; ``ValueError`` (and the like) if malformed."""
        doc = json.loads(raw)
        try:
            drains = {
                str(c): ov.parse(offs, f"drains.{c}") for c, offs in doc.get("drains", {}).items()
            }
        except ValidationError as exc:
            raise ValueError(str(exc)) from exc
        return cls(
            drains=drains,
            failovers=tuple(FailoverRecord.from_document(f) for f in doc.get("failovers", [])),
        )

    def failover_into(self, cluster: str) -> FailoverRecord | None:
        """The latest failover whose target is ``cluster``."""
        for record in reversed(self.failovers):
            if record.to_cluster == cluster:
                return record
        return None

    def failover_from(self, cluster: str) -> FailoverRecord | None:
        """The latest failover whose source is ``cluster``."""
        for record in reversed(self.failovers):
            if record.from_cluster == cluster:
                return record
        return None


@dataclass(frozen=True)
class StreamView:
    """A stream as the coordinator sees it: the last valid document and status."""

    spec: StreamSpec
    spec_revision: int
    status: StreamStatus = field(default_factory=StreamStatus)
    status_revision: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def generation(self) -> int:
        """Monotonic metadata generation of the stream: the etcd revision of
        its latest applied change (document or status)."""
        return max(self.spec_revision, self.status_revision)
