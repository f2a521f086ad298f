"""A short per-stream history of what changed and why (reconciles, drains,
failovers, abandoned ranges, rejected documents), kept in etcd so it survives
coordinator restarts, and printed by ``multikafka admin streams history``."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass

from multikafka.coordinator.state.etcd import MALFORMED, EtcdClient
from multikafka.coordinator.state.per_stream import ChangedStreams
from multikafka.core._background import BackgroundTasks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    time_ms: int
    generation: int
    kind: str
    cluster: str
    detail: str
    #: Who asked for it ("" for what the coordinator did by itself).
    principal: str = ""


class History:
    """Entries are kept in memory and written to etcd in the background soon
    after they are recorded (again after a pause while etcd is away)."""

    def __init__(self, etcd: EtcdClient, prefix: str, size: int, *, retry_s: float = 1.0) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/history/"
        self._size = size
        self._retry_s = retry_s
        self._entries: dict[str, deque[Entry]] = {}
        self._dirty = ChangedStreams(etcd, self._prefix, self._encode, "history")
        self._changed = asyncio.Event()
        self._tasks = BackgroundTasks("history")

    async def load(self) -> None:
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        for kv in kvs:
            try:
                items = [Entry(**e) for e in json.loads(kv.value)]
            except MALFORMED:
                logger.warning("unreadable history ignored", extra={"key": kv.key})
                continue
            self._entries[kv.key[len(self._prefix) :]] = deque(items, maxlen=self._size)

    def start(self) -> None:
        """Write changes at once, and again after ``retry_s`` while etcd is away."""
        self._tasks.every("persist", self._retry_s, self.flush, wake=self._changed)

    async def stop(self) -> None:
        """Stop persisting in the background, then try once to write what is left."""
        await self._tasks.stop()
        await self.flush()

    def record(
        self,
        stream: str,
        kind: str,
        *,
        cluster: str = "",
        detail: str = "",
        generation: int = 0,
        principal: str = "",
    ) -> None:
        """Append an entry (persisted in the background)."""
        entry = Entry(int(time.time() * 1000), generation, kind, cluster, detail, principal)
        self._entries.setdefault(stream, deque(maxlen=self._size)).append(entry)
        self._dirty.add(stream)
        logger.info(
            "%s %s",
            kind,
            detail,
            extra={
                "stream": stream,
                "cluster": cluster,
                "generation": generation,
                "kind": kind,
                "principal": principal,
            },
        )
        self._changed.set()

    def entries(self, stream: str, limit: int = 0) -> list[Entry]:
        items = list(self._entries.get(stream, ()))
        return items[-limit:] if limit > 0 else items

    def forget(self, stream: str) -> None:
        self._entries.pop(stream, None)
        self._dirty.add(stream)
        self._changed.set()

    async def flush(self) -> None:
        """Write every changed stream's history (what etcd does not take now
        is written next time)."""
        await self._dirty.flush()

    def _encode(self, stream: str) -> bytes | None:
        entries = self._entries.get(stream)
        return None if entries is None else json.dumps([asdict(e) for e in entries]).encode()
