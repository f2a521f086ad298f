"""Per-stream values the leader keeps in memory and writes to etcd in the
background (history, read marks): each changed stream's value is written to
``<prefix><stream>``, or its key deleted when the stream has none any more."""

from __future__ import annotations

import logging
from collections.abc import Callable

from multikafka.coordinator.state.etcd import EtcdClient
from multikafka.core.exceptions import UnavailableError

logger = logging.getLogger(__name__)


class ChangedStreams:
    """The streams whose value changed since it was last written."""

    def __init__(
        self, etcd: EtcdClient, prefix: str, encode: Callable[[str], bytes | None], what: str
    ) -> None:
        self._etcd = etcd
        self.prefix = prefix
        #: A stream's value as stored, or None when it has none (delete the key).
        self._encode = encode
        self._what = what
        self._changed: set[str] = set()

    def add(self, stream: str) -> None:
        self._changed.add(stream)

    async def flush(self) -> None:
        """Write every changed stream's value. When etcd does not take one,
        it and the rest are written next time."""
        while self._changed:
            stream = self._changed.pop()
            key = self.prefix + stream
            raw = self._encode(stream)
            try:
                if raw is not None:
                    await self._etcd.put(key, raw)
                else:
                    await self._etcd.delete(key)
            except UnavailableError:
                self._changed.add(stream)
                logger.warning("could not persist %s", self._what, extra={"stream": stream})
                return
