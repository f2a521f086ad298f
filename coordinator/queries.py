"""Progress of the queries reading through the coordinator
(``<prefix>/queries/<query id>``): the last committed offsets, and the
positions each query really read to on splits whose ranges were abandoned
(failover translation starts from those, never from further on).

The offsets are stored in their compact document form
(:func:`multikafka_core.offsets.to_document`), and a value above
:data:`COMPRESS_ABOVE` bytes is stored zlib-compressed: a query over 100,000
splits commits about 1 MB of JSON every batch, and etcd refuses requests
over 1.5 MiB. Values of earlier versions (flat offsets, plain JSON) are read.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.etcd import MALFORMED, EtcdClient
from multikafka_core import offsets as ov
from multikafka_core.exceptions import ValidationError
from multikafka_core.offsets import SplitOffsets

logger = logging.getLogger(__name__)

#: A query that committed within this many seconds counts as running.
RUNNING_WITHIN_S = 3600.0
#: Progress values larger than this are stored zlib-compressed.
COMPRESS_ABOVE = 64 * 1024


@dataclass
class QueryProgress:
    query_id: str
    stream: str
    offsets: SplitOffsets = field(default_factory=lambda: ov.EMPTY)
    updated_ms: int = 0
    #: split -> first offset this query did not read because its range was abandoned.
    abandoned: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        raw = json.dumps(
            {
                "stream": self.stream,
                "offsets": ov.to_document(self.offsets),
                "updated_ms": self.updated_ms,
                "abandoned": self.abandoned,
            },
            sort_keys=True,
        ).encode()
        return zlib.compress(raw, 1) if len(raw) > COMPRESS_ABOVE else raw

    @classmethod
    def from_json(cls, query_id: str, raw: bytes) -> QueryProgress:
        """Parse a stored value (compressed or not; flat or compact offsets)."""
        if raw[:1] != b"{":
            raw = zlib.decompress(raw)
        doc = json.loads(raw)
        return cls(
            query_id,
            str(doc["stream"]),
            ov.parse(doc.get("offsets", {})),
            int(doc.get("updated_ms", 0)),
            {str(k): int(v) for k, v in doc.get("abandoned", {}).items()},
        )


class QueryStore:
    def __init__(self, etcd: EtcdClient, prefix: str) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/queries/"
        self._queries: dict[str, QueryProgress] = {}

    async def load(self) -> None:
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            qid = kv.key[len(self._prefix) :]
            try:
                self._queries[qid] = QueryProgress.from_json(qid, kv.value)
            except (*MALFORMED, zlib.error, ValidationError):
                logger.warning("unreadable query progress ignored", extra={"key": kv.key})

    def get(self, query_id: str) -> QueryProgress | None:
        return self._queries.get(query_id)

    def all(self) -> list[QueryProgress]:
        return [self._queries[q] for q in sorted(self._queries)]

    def of_stream(self, stream: str) -> list[QueryProgress]:
        return [q for q in self.all() if q.stream == stream]

    def running(self, stream: str, within_s: float = RUNNING_WITHIN_S) -> list[QueryProgress]:
        """Queries of ``stream`` that committed within ``within_s`` seconds."""
        horizon = (time.time() - within_s) * 1000
        return [q for q in self.of_stream(stream) if q.updated_ms >= horizon]

    async def commit(self, query_id: str, stream: str, end: Mapping[str, int]) -> QueryProgress:
        q = self._queries.setdefault(query_id, QueryProgress(query_id, stream))
        q.stream = stream
        q.offsets = ov.as_offsets(end)
        q.updated_ms = int(time.time() * 1000)
        # An abandoned position matters until the split left the vector.
        q.abandoned = {s: o for s, o in q.abandoned.items() if s in end}
        await self._etcd.put(self._prefix + query_id, q.to_json())
        return q

    async def abandon(self, query_id: str, stream: str, split: str, from_offset: int) -> None:
        q = self._queries.setdefault(query_id, QueryProgress(query_id, stream))
        prev = q.abandoned.get(split)
        if prev is not None and prev <= from_offset:
            return
        q.abandoned[split] = from_offset
        await self._etcd.put(self._prefix + query_id, q.to_json())
