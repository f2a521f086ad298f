"""Per-stream (or per-query) values the leader keeps in memory and writes to
etcd in the background (history, read marks, query progress): each changed
value is written to ``<prefix><name>``, or its key deleted when there is none
any more. Values are written :data:`PER_TXN` to a transaction: a thousand
queries' progress is a few etcd requests, not a thousand."""

from __future__ import annotations

import logging
from collections.abc import Callable

from multikafka.coordinator.state.etcd import EtcdClient
from multikafka.core.exceptions import UnavailableError

logger = logging.getLogger(__name__)

#: Values written per etcd transaction (etcd takes 128 operations by default).
PER_TXN = 64
#: Bytes of values per transaction (etcd refuses requests over 1.5 MiB).
TXN_BYTES = 1024 * 1024


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
        """Write every changed value. When etcd does not take some, they and
        the rest are written next time."""
        while self._changed:
            names: list[str] = []
            puts: list[tuple[str, bytes]] = []
            deletes: list[str] = []
            size = 0
            while self._changed and len(names) < PER_TXN:
                name = self._changed.pop()
                raw = self._encode(name)
                if raw is None:
                    names.append(name)
                    deletes.append(self.prefix + name)
                    continue
                if puts and size + len(raw) > TXN_BYTES:
                    self._changed.add(name)
                    break
                names.append(name)
                puts.append((self.prefix + name, raw))
                size += len(raw)
            try:
                if len(puts) == 1:
                    await self._etcd.put(*puts[0])
                elif puts:
                    await self._etcd.put_all(puts)
                for key in deletes:
                    await self._etcd.delete(key)
            except UnavailableError as exc:
                self._changed.update(names)
                logger.warning(
                    "could not persist %s",
                    self._what,
                    extra={"names": names[:5], "error": str(exc)},
                )
                return
